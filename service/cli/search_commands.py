"""`strategist sample` and `strategist select`: constrained sampling and Eq. 11 diverse selection, offline.

    strategist sample --model M --cluster C -n N --seed S [--no-constraints] --json
    strategist select --model M --cluster C -n M -k K --alpha A --seed S --json

``select`` runs one round (``search.round.run_round``, the same round as the service's and the
AutoSync searcher's, with the same defaults): M feasible strategies from the constrained sampler,
scored by the analytical cost model (Eq. 1-3), the qualified fraction kept, K picked by Eq. 11.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from search import InfeasibleSpaceError, Sampler, make_sampler
from search.round import DEFAULTS, run_round
from search.space import COMPRESSIONS, SpaceConfig, compressor_kinds
from service.cli.spec_commands import fail, resolve_cluster, resolve_model
from simulator.analytical import AnalyticalSimulator
from simulator.spec import ClusterSpec, ModelSpec, PSSync, Strategy
from simulator.spec.limits import LIMITS

COMPRESSION_HELP = "none (lossless, default) | fp16 | powersgd | all: lossy compressors on offer."


def register(app: typer.Typer) -> None:
    """Add the ``sample`` and ``select`` commands to the root app."""
    app.command("sample")(sample)
    app.command("select")(select)


def _draw(
    kind: str, model: ModelSpec, cluster: ClusterSpec, n: int, seed: int, compression: str = "none"
) -> list[Strategy]:
    if compression not in COMPRESSIONS:
        raise fail(f"--compression: must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    space = SpaceConfig(compressors=compressor_kinds(compression))
    sampler: Sampler = make_sampler(kind, model, cluster, seed, space=space)  # type: ignore[arg-type]
    try:
        return sampler.sample(n)
    except InfeasibleSpaceError as e:
        raise fail(f"model: nothing fits in memory on {cluster.name}: {e}") from None


def _summary(s: Strategy) -> dict[str, Any]:
    syncs = [x for vs in s.variables for x in vs.shards]
    ps = [x for x in syncs if isinstance(x, PSSync)]
    groups = {x.group for x in syncs if not isinstance(x, PSSync)}
    return {
        "variables": len(s.variables),
        "shards": len(syncs),
        "ps_shards": len(ps),
        "servers": len({x.server for x in ps}),
        "merge_groups": len(groups),
        "partitioned": sum(vs.partition.shards > 1 for vs in s.variables),
    }


def sample(
    model: str = typer.Option(..., "--model", help="Zoo model name or model JSON file."),
    cluster: str = typer.Option(..., "--cluster", help="Zoo cluster name or cluster JSON file."),
    n: int = typer.Option(10, "-n", min=1, max=LIMITS.samples_per_round, help="How many strategies."),
    seed: int = typer.Option(
        0, "--seed", min=0, max=LIMITS.seed, help="Sampler seed (same seed, same strategies)."
    ),
    compression: str = typer.Option("none", "--compression", help=COMPRESSION_HELP),
    no_constraints: bool = typer.Option(
        False, "--no-constraints", help="Uniform placement and groups (no c_lb, no c_am)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of strategies."),
) -> None:
    """Sample strategies that fit in memory, under AutoSync's constraints unless told otherwise."""
    m, c = resolve_model(model), resolve_cluster(cluster)
    strategies = _draw("random" if no_constraints else "constrained", m, c, n, seed, compression)
    if as_json:
        typer.echo(json.dumps([s.model_dump(mode="json") for s in strategies], indent=1))
        return
    table = Table(title=f"{n} strategies, {m.name} on {c.name}, seed {seed}")
    for col in ("#", "shards", "PS shards", "servers", "merge groups", "partitioned vars"):
        table.add_column(col, justify="right")
    for i, s in enumerate(strategies):
        d = _summary(s)
        table.add_row(
            str(i), *(str(d[k]) for k in ("shards", "ps_shards", "servers", "merge_groups", "partitioned"))
        )
    Console().print(table)


def select(
    model: str = typer.Option(..., "--model", help="Zoo model name or model JSON file."),
    cluster: str = typer.Option(..., "--cluster", help="Zoo cluster name or cluster JSON file."),
    m: int = typer.Option(
        100, "-n", min=1, max=LIMITS.samples_per_round, help="Candidates M sampled and scored."
    ),
    k: int = typer.Option(5, "-k", min=1, max=LIMITS.candidates_per_round, help="Strategies K chosen."),
    alpha: float = typer.Option(
        DEFAULTS.alpha, "--alpha", min=0.0, help="Eq. 11 similarity weight (normalised)."
    ),
    qualified_fraction: float = typer.Option(
        DEFAULTS.qualified_fraction,
        "--qualified-fraction",
        min=0.0,
        max=1.0,
        help="Best-predicted fraction of the M that qualifies for Eq. 11 (at least K).",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=LIMITS.seed, help="Sampler seed."),
    compression: str = typer.Option("none", "--compression", help=COMPRESSION_HELP),
    similarity: str = typer.Option(
        DEFAULTS.similarity, "--similarity", help="'factor' or 'hidden' (cosine)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """One round (``search.round.run_round``): M strategies sampled under the constraints, scored by
    the analytical model, the qualified fraction kept, K chosen by Eq. 11."""
    if k > m:
        raise fail(f"-k: {k} is more than the {m} candidates of -n")
    if similarity not in ("factor", "hidden"):
        raise fail(f"--similarity: unknown {similarity!r}; expected 'factor' or 'hidden'")
    if compression not in COMPRESSIONS:
        raise fail(f"--compression: must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    if qualified_fraction <= 0:
        raise fail(f"--qualified-fraction: must be > 0, got {qualified_fraction}")
    model_spec, cluster_spec = resolve_model(model), resolve_cluster(cluster)
    defaults = replace(
        DEFAULTS,
        alpha=alpha,
        qualified_fraction=qualified_fraction,
        similarity=similarity,  # type: ignore[arg-type]
    )
    simulator = AnalyticalSimulator()
    try:
        chosen = run_round(
            model_spec,
            cluster_spec,
            simulator,
            samples=m,
            k=k,
            seed=seed,
            defaults=defaults,
            space=SpaceConfig(compressors=compressor_kinds(compression)),
        )
    except InfeasibleSpaceError as e:
        raise fail(f"model: nothing fits in memory on {cluster_spec.name}: {e}") from None
    if as_json:
        out = {
            "model": model_spec.name,
            "cluster": cluster_spec.name,
            "candidates": m,
            "k": k,
            "alpha": alpha,
            "qualified_fraction": qualified_fraction,
            "qualified": chosen.qualified,
            "seed": seed,
            "similarity": similarity,
            "simulator": simulator.name,
            "objective": chosen.objective,
            "chosen": [
                {"candidate": i, "predicted_time_s": t, "strategy": s.model_dump(mode="json")}
                for i, t, s in zip(chosen.indices, chosen.predicted, chosen.strategies, strict=True)
            ],
            "pairwise_similarity": [list(row) for row in chosen.similarity],
            "mean_pairwise_similarity": chosen.mean_pairwise_similarity,
        }
        typer.echo(json.dumps(out, indent=1))
        return
    table = Table(
        title=f"{k} of {m} candidates ({chosen.qualified} qualified), {model_spec.name} on "
        f"{cluster_spec.name}, alpha {alpha}"
    )
    for col in ("candidate", "predicted ms", "PS shards", "merge groups", "mean sim to others"):
        table.add_column(col, justify="right")
    for row, (i, t, s) in enumerate(zip(chosen.indices, chosen.predicted, chosen.strategies, strict=True)):
        others = [x for j, x in enumerate(chosen.similarity[row]) if j != row]
        d = _summary(s)
        table.add_row(
            str(i),
            f"{t * 1e3:.2f}",
            str(d["ps_shards"]),
            str(d["merge_groups"]),
            f"{sum(others) / len(others):.3f}" if others else "-",
        )
    Console().print(table)
