"""Validating a search's plan kind and options at create time, or a 422 naming the field."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, status

from service.api.errors import field_error
from service.api.schemas.searches import SearchCreate
from service.domain import SpecRecord
from service.plans import OptionsInvalid, plan_kind


def plan_options(body: SearchCreate, model: SpecRecord, cluster: SpecRecord) -> dict[str, Any] | None:
    """The options to store for ``body.plan_kind`` (None for 'sync'); 422 at the offending field.

    A 'sync' search takes no plan options. Another kind validates its own against the model and
    cluster (``service.plans.PlanKind.validate``): every issue becomes one 422 entry.
    """
    try:
        kind = plan_kind(body.plan_kind)
    except ValueError as e:
        raise field_error(["body", "plan_kind"], str(e)) from None
    if kind is None:
        if body.plan_options:
            raise field_error(["body", "plan_options"], "a 'sync' search takes no plan options")
        return None
    try:
        return kind.validate(
            body.plan_options,
            objective=body.objective,
            model=model.model_spec(),
            cluster=cluster.cluster_spec(),
        )
    except OptionsInvalid as e:
        detail = [{"loc": ["body", *path], "msg": msg, "type": "value_error"} for path, msg in e.issues]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail) from None
