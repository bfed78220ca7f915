"""Terminal rendering of a cost-objective (heterogeneous) search: plans with money, throughput, provisioning."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table


def describe_stages(plan: dict[str, Any]) -> str:
    """One line per plan: 'layers 0-3 c5.24xlarge-core x128 | 4-15 g4dn.12xlarge-T4 x3'."""
    parts = []
    for i, st in enumerate(plan.get("stages", [])):
        head = "layers " if i == 0 else ""
        parts.append(f"{head}{st['first_layer']}-{st['last_layer'] - 1} {st['resource_type']} x{st['units']}")
    return " | ".join(parts)


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def costs_table(costs: dict[str, Any]) -> Table:
    """Every evaluated plan, cheapest predicted first: predicted and measured money and throughput,
    the stages with their units; '*' marks the best (cheapest measured meeting the limit), 'F' a plan
    on the measured (else predicted) money vs throughput front."""
    best = (costs.get("best") or {}).get("label")
    table = Table(
        title=f"plans (limit {costs['throughput_limit']:g} samples/s, scheduler {costs['scheduler']})",
        expand=False,
    )
    for col in (
        "plan",
        "state",
        "stages (type x units)",
        "pred USD",
        "pred samples/s",
        "meas USD",
        "meas samples/s",
        "USD/h",
        "",
    ):
        table.add_column(col, overflow="fold")
    for p in sorted(costs["plans"], key=lambda p: (p["predicted_money"], p["label"])):
        marks = ("*" if p["label"] == best else "") + (
            "F" if p["on_measured_front"] or (p["measured_money"] is None and p["on_predicted_front"]) else ""
        )
        if not p["meets_limit"]:
            marks += " below limit"
        table.add_row(
            escape(p["label"]),
            p["state"],
            escape(describe_stages(p["plan"])),
            _num(p["predicted_money"], ".2f"),
            _num(p["predicted_throughput"], ".4g"),
            _num(p["measured_money"], ".2f"),
            _num(p["measured_throughput"], ".4g"),
            _num(p["price_per_hour"], ".2f"),
            marks,
        )
    return table


def cost_lines(costs: dict[str, Any]) -> list[str]:
    """The answer in words: the best measured plan and what it saves over each baseline."""
    best = costs.get("best")
    if best is None:
        return [f"no measured plan meets {costs['throughput_limit']:g} samples/s yet"]
    lines = [
        f"best: {best['label']} {best['measured_money']:.2f} USD at {best['measured_throughput']:.4g} samples/s "
        f"(predicted {best['predicted_money']:.2f} USD at {best['predicted_throughput']:.4g}): "
        f"{describe_stages(best['plan'])}"
    ]
    for name, ratio in sorted(costs.get("savings", {}).items()):
        lines.append(f"  {name} costs {ratio:.2f}x the best plan")
    return lines


def heterogeneous_fields(objective: str, throughput_limit: float | None, scheduler: str) -> dict[str, Any]:
    """The search-create fields of ``--throughput-limit``/``--scheduler``: a heterogeneous plan kind with
    its options (checked here so that a bad value is one line naming the option); none without a limit."""
    import typer
    from pydantic import ValidationError

    from service.plans.heterogeneous import HeterogeneousOptions

    if throughput_limit is None:
        return {}
    if objective != "cost":
        typer.echo(
            "error: --objective: a --throughput-limit search minimises money: use --objective cost", err=True
        )
        raise typer.Exit(2)
    options = {"throughput_limit": throughput_limit, "scheduler": scheduler}
    try:
        HeterogeneousOptions.model_validate(options)
    except ValidationError as e:
        err = e.errors()[0]
        option = "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "--throughput-limit"
        typer.echo(f"error: {option}: {err['msg']}", err=True)
        raise typer.Exit(2) from None
    return {"plan_kind": "heterogeneous", "plan_options": options}


def print_costs(console: Any, status: dict[str, Any], costs: dict[str, Any]) -> None:
    """``strategist search status`` of a heterogeneous search."""
    s = status["search"]
    console.print(
        escape(
            f"search {s['id']} [{s['state']}] {s['model_name']} on {s['cluster_name']}: cost objective, "
            f"round {s['current_round']}, {status['candidate_trials_done']}/{s['trial_budget']} candidate trials done"
        )
    )
    console.print(costs_table(costs))
    for line in cost_lines(costs):
        console.print(escape(line))
