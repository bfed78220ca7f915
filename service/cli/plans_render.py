"""CLI side of pipeline and hybrid searches (issues 17, 19): ``search create --plan`` options, status lines.

``plan_fields`` turns ``--plan pipeline|hybrid`` and its options into the request's ``plan_kind`` and
``plan_options`` (shape errors are one line naming the option; the server checks the rest against
the model and cluster and answers 422 naming the option). ``plan_lines`` prints what a search's
measured trials found: a pipeline trial's chosen (k, b) and the tuner's switches, a hybrid
trial's devices, shares and busy time per TaskGraph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

PLANS = ("sync", "pipeline", "hybrid", "heterogeneous")


def _fail(option: str, reason: str) -> typer.Exit:
    typer.echo(f"error: {option}: {reason}", err=True)
    return typer.Exit(2)


def plan_fields(
    plan: str,
    stages: str | None,
    memory_per_device_gb: float | None,
    global_batch: int | None,
    annotate: Sequence[str],
    fixed: bool,
) -> dict[str, Any]:
    """The search-create fields of ``--plan`` and its options ({} for 'sync')."""
    if plan not in PLANS:
        raise _fail("--plan", f"must be one of {', '.join(PLANS)}, got {plan!r}")
    pipeline_only = {
        "--stages": stages is not None,
        "--memory-per-device-gb": memory_per_device_gb is not None,
        "--fixed": fixed,
    }
    given = [o for o, on in pipeline_only.items() if on]
    if plan != "pipeline" and given:
        raise _fail(given[0], "needs --plan pipeline")
    if plan != "hybrid" and annotate:
        raise _fail("--annotate", "needs --plan hybrid")
    if plan in ("sync", "heterogeneous"):  # heterogeneous: --throughput-limit and --scheduler
        if global_batch is not None:
            raise _fail("--global-batch", "needs --plan pipeline or hybrid")
        return {}
    options: dict[str, Any] = {}
    if global_batch is not None:
        options["global_batch"] = global_batch
    if plan == "pipeline":
        if stages is not None:
            if stages != "choose" and not stages.isdigit():
                raise _fail("--stages", f'must be a number of stages or "choose", got {stages!r}')
            options["stages"] = stages if stages == "choose" else int(stages)
        if memory_per_device_gb is not None:
            options["memory_per_device_gb"] = memory_per_device_gb
        if fixed:
            options["adaptive"] = False
    else:
        annotations: dict[str, dict[str, Any]] = {}
        for item in annotate:
            module, sep, rest = item.partition("=")
            primitive, _, degree = rest.partition(":")
            if (
                not sep
                or not module
                or primitive not in ("replicate", "split")
                or (degree and not degree.isdigit())
            ):
                raise _fail("--annotate", f"must be MODULE=replicate|split[:DEVICES], got {item!r}")
            annotations[module] = {"primitive": primitive, **({"degree": int(degree)} if degree else {})}
        if annotations:
            options["annotations"] = annotations
    return {"plan_kind": plan, "plan_options": options}


def _kb(d: dict[str, Any]) -> str:
    return f"{d['schedule']} k={d['k']} b={d['b']}"


def plan_lines(trials: Sequence[dict[str, Any]]) -> list[str]:
    """One block per measured pipeline or hybrid trial (see the module docstring)."""
    from service.web.render import seconds  # the dashboard's duration format

    lines: list[str] = []
    for t in trials:
        details = (t.get("measurement") or {}).get("details") or {}
        who = f"baseline {t['baseline']}" if t.get("baseline") else f"candidate {t.get('candidate_id')}"
        head = f"trial {t['id']} ({who}): median {seconds(t.get('median_time'))}"
        if details.get("plan_kind") == "pipeline":
            sw = details.get("switches") or []
            lines.append(
                f"{head}, chosen {_kb(details['chosen'])} (started {_kb(details['start'])}), {len(sw)} switches"
            )
            lines += [f"  step {s['step']}: {_kb(s['from'])} -> {_kb(s['to'])}: {s['reason']}" for s in sw]
        elif details.get("plan_kind") == "hybrid" and t.get("strategy", {}).get("kind") == "hybrid":
            from simulator.spec.hybrid import plan_document

            plan, _ = plan_document(t["strategy"])
            busy = details.get("busy_s") or {}
            lines.append(f"{head}, {plan.name or 'hybrid plan'}")
            for i, tg in enumerate(plan.task_graphs):
                shares = plan.device_shares(i)
                devs = ", ".join(f"{d} share {shares[d]} busy {seconds(busy.get(d))}" for d in tg.devices)
                lines.append(
                    f"  TaskGraph {i} layers {tg.first_layer}-{tg.last_layer - 1} {tg.primitive}({tg.degree}): {devs}"
                )
        elif t.get("failure_reason"):
            lines.append(f"{head}, failed: {t['failure_reason']}")
    return lines


def result_lines(status: dict[str, Any]) -> list[str]:
    """The search's answer, the same for every plan kind: best vs its baseline, and the recommendation."""
    s, r = status["search"], status.get("result")
    lines: list[str] = []
    if s["state"] == "cancelled":
        lines.append(
            f"cancelled after {status['candidate_trials_done']} of {s['trial_budget']} candidate trials; "
            "the rest will not run"
        )
    elif s["state"] == "failed":
        lines.append(f"failed: {s.get('failure_reason') or 'no reason recorded'}")
    if status.get("state_detail"):
        lines.append(f"waiting for workers: {status['state_detail']}")
    if not r:
        return lines
    lines.append(f"result ({r['plan_kind']}): {r['verdict']}")
    if r["best"]:
        lines.append(f"  best {r['best']['label']}: {r['best']['description']}")
    if r["baseline"]:
        lines.append(f"  baseline {r['baseline']['label']}: {r['baseline']['description']}")
    if r["recommended"]:
        lines.append(f"recommended: {r['recommended']['label']} ({r['recommended_reason']})")
    return lines
