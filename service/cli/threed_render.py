"""CLI side of hybrid searches in the 3D space (issue 42): ``search create --plan hybrid --space 3d``.

``threed_options`` turns ``--space 3d`` and its options (``--gpus``, ``--zero-stages``,
``--recompute``, ``--micro-batches``, ``--fused-attention``, ``--heads``; ``--global-batch`` is the
hybrid kind's own) into the request's ``plan_options``. A malformed value is a one-line error naming
the option, before any request; the server checks the rest against the model and cluster (422
naming the option's field). ``ranking_lines`` (``service.plans.hybrid_threed``) prints the answer.
"""

from __future__ import annotations

from typing import Any

import typer

from service.plans.hybrid_threed import RECOMPUTE, ranking_lines, ranking_rows

OPTIONS = ("--gpus", "--zero-stages", "--recompute", "--micro-batches", "--fused-attention", "--heads")


def _fail(option: str, reason: str) -> typer.Exit:
    typer.echo(f"error: {option}: {reason}", err=True)
    return typer.Exit(2)


def _ints(option: str, text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise _fail(option, f"must be comma-separated whole numbers, got {text[:60]!r}")
    return [int(p) for p in parts]


def threed_options(
    plan: str,
    space: str | None,
    gpus: int | None,
    zero_stages: str | None,
    recompute: str | None,
    micro_batches: str | None,
    fused_attention: str | None,
    heads: int | None,
) -> dict[str, Any]:
    """The 3D ``plan_options`` entries ({} without ``--space``); typer.Exit(2) naming a bad option."""
    given = {
        "--gpus": gpus,
        "--zero-stages": zero_stages,
        "--recompute": recompute,
        "--micro-batches": micro_batches,
        "--fused-attention": fused_attention,
        "--heads": heads,
    }
    if space is None:
        for option, value in given.items():
            if value is not None:
                raise _fail(option, "needs --plan hybrid --space 3d")
        return {}
    if plan != "hybrid":
        raise _fail("--space", "needs --plan hybrid")
    if space != "3d":
        raise _fail("--space", f"must be 3d (leave it out for Whale's TaskGraph plans), got {space!r}")
    out: dict[str, Any] = {"space": "3d"}
    if gpus is not None:
        out["gpus"] = gpus
    if heads is not None:
        out["heads"] = heads
    if zero_stages is not None:
        stages = _ints("--zero-stages", zero_stages)
        if any(z > 3 for z in stages):
            raise _fail("--zero-stages", f"must be ZeRO stages among 0,1,2,3, got {zero_stages[:60]!r}")
        out["zero_stages"] = stages
    if recompute is not None:
        modes = [m.strip() for m in recompute.split(",")]
        if not all(m in RECOMPUTE for m in modes):
            raise _fail("--recompute", f"must be among {','.join(RECOMPUTE)}, got {recompute[:60]!r}")
        out["recompute"] = modes
    if micro_batches is not None:
        out["micro_batches"] = _ints("--micro-batches", micro_batches)
    if fused_attention is not None:
        flags = [f.strip().lower() for f in fused_attention.split(",")]
        if not all(f in ("true", "false") for f in flags):
            raise _fail(
                "--fused-attention", f"must be true, false or false,true, got {fused_attention[:60]!r}"
            )
        out["fused_attention"] = [f == "true" for f in flags]
    return out


def is_3d_search(search: dict[str, Any]) -> bool:
    """Whether a search (its public JSON) is a hybrid search in the 3D space."""
    options = search.get("plan_options") or {}
    return search.get("plan_kind") == "hybrid" and options.get("space") == "3d"


def ranking_text(candidates: list[dict[str, Any]]) -> list[str]:
    """The predicted ranking of a 3D search's candidates (public JSON), as lines."""
    return ranking_lines(ranking_rows([(c["id"], c["rank"], c["strategy"]) for c in candidates]))
