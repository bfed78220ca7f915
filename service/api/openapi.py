"""The published OpenAPI schema: request bodies parsed by hand (`service.api.errors.parse_request`)
documented as the spec they must be, so the schema never accepts ``{}`` where the server refuses it.

Routes taking a spec read it as a plain ``dict`` and validate it themselves (so a 422 names every
bad field path of the spec); on its own FastAPI would publish that body as "any object". Each such
route carries ``openapi_extra=spec_body(Spec)``, and `install` adds the spec's JSON Schema (and its
sub-schemas) to ``components.schemas`` under their pydantic names.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

#: Input schemas get their own names: a response model may share a sub-schema's class name.
REF = "#/components/schemas/{model}-Input"
_BODIES: dict[str, type[BaseModel]] = {}


def spec_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route whose JSON body must be a ``model``."""
    _BODIES[model.__name__] = model
    schema = {"$ref": REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` include the schemas `spec_body` refers to; ValueError at the first
    call if one of their names is already a different component."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, model in sorted(_BODIES.items()):
            body = model.model_json_schema(ref_template=REF, mode="validation")
            for sub, sub_schema in [*body.pop("$defs", {}).items(), (name, body)]:
                if components.setdefault(f"{sub}-Input", sub_schema) != sub_schema:
                    raise ValueError(f"OpenAPI component {sub} is defined twice, differently")
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
