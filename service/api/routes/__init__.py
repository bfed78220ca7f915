"""One router per resource; `service.api.app` mounts them all under /api/v1."""
