"""The REST API: `create_app(settings)` builds the FastAPI application served under /api/v1."""
