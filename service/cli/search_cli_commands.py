"""`strategist search create | status | watch`: a search over HTTP, with a live progress view.

These commands talk to a running API (``--api``, default $STRATEGIST_API_URL) with a user token
(``--token``, default $STRATEGIST_TOKEN) through `service.client.StrategistClient`, the typed
client a training pipeline uses, so the CLI and pipelines exercise the same code.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Annotated, Any

import httpx
import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from service.api.schemas.searches import SearchCreate, SearchStatusPublic
from service.cli.costs_render import cost_lines, costs_table, heterogeneous_fields, print_costs
from service.cli.plans_render import plan_fields, plan_lines, result_lines
from service.cli.threed_render import is_3d_search, ranking_text, threed_options
from service.client import ApiError, StrategistClient
from service.plans.results import describe

search_app = typer.Typer(
    help="Create and follow strategy searches (HTTP client of the API).", no_args_is_help=True
)

ApiOpt = Annotated[str, typer.Option(help="Base URL of the API.", envvar="STRATEGIST_API_URL")]
TokenOpt = Annotated[str, typer.Option(help="A user token.", envvar="STRATEGIST_TOKEN", show_default=False)]


def as_json(obj: BaseModel) -> dict[str, Any]:
    """A response model as the JSON dict the renderers below read."""
    return obj.model_dump(mode="json")


def describe_strategy(strategy: dict[str, Any]) -> str:
    """One line: how a strategy synchronises (collective groups, compressors, PS servers, splits)."""
    shards = [sh for v in strategy.get("variables", []) for sh in v.get("shards", [])]
    split = sum(1 for v in strategy.get("variables", []) if v.get("partition", {}).get("shards", 1) > 1)
    coll = [sh for sh in shards if sh.get("kind") == "collective"]
    ps = [sh for sh in shards if sh.get("kind") == "ps"]
    parts = []
    if coll:
        comp = Counter(sh.get("compressor", {}).get("kind", "none") for sh in coll)
        algo = Counter(sh.get("algorithm", "ring") for sh in coll)
        groups = len({sh.get("group", 0) for sh in coll})
        parts.append(
            f"{len(coll)} shards all-reduce in {groups} group(s) "
            f"[{', '.join(f'{k}×{n}' for k, n in sorted(comp.items()))}; "
            f"{', '.join(f'{k}×{n}' for k, n in sorted(algo.items()))}]"
        )
    if ps:
        servers = Counter(sh.get("server") for sh in ps)
        local = sum(1 for sh in ps if sh.get("local_replication"))
        parts.append(
            f"{len(ps)} shards on PS [{', '.join(f'{k}×{n}' for k, n in sorted(servers.items()))}"
            f"{f'; {local} with local replication' if local else ''}]"
        )
    if split:
        parts.append(f"{split} variable(s) partitioned")
    return "; ".join(parts) or "empty strategy"


def best_table(status: dict[str, Any], trials: list[dict[str, Any]], top: int = 5) -> Table:
    """The best measured candidates so far and the baselines, with speed-ups over each family's
    tuned baseline (its fastest measured member) of the candidate's own space: a lossless candidate
    against lossless families only, a lossy one against lossy families only."""
    from search.baselines import family_of, is_lossy_baseline
    from search.space import space_of
    from simulator.spec import Strategy

    tuned: dict[str, float] = {}
    for b in status.get("baselines", []):
        m, fam = b.get("median_time"), family_of(b["name"])
        if m and (fam not in tuned or m < tuned[fam]):
            tuned[fam] = m
    table = Table(title="best so far (measured median iteration time)", expand=False)
    for col in (
        "trial",
        "round",
        "space",
        "strategy",
        "predicted s",
        "measured s",
        *[f"vs {n}" for n in tuned],
    ):
        table.add_column(col, overflow="fold")
    done = [t for t in trials if t.get("candidate_id") is not None and t.get("median_time")]
    for t in sorted(done, key=lambda t: t["median_time"])[:top]:
        if t["strategy"].get("kind", "strategy") != "strategy":  # another plan kind: its own baseline
            row = [str(t["id"]), str(t.get("round_index")), "-", escape(describe(t["strategy"]))]
            pred = t.get("predicted_time")
            table.add_row(
                *row, f"{pred:.3f}" if pred else "-", f"{t['median_time']:.3f}", *["" for _ in tuned]
            )
            continue
        space = space_of(Strategy.model_validate(t["strategy"]))
        speed = [
            f"{b / t['median_time']:.2f}×" if is_lossy_baseline(fam) == (space == "lossy") else "-"
            for fam, b in tuned.items()
        ]
        pred = t.get("predicted_time")
        table.add_row(
            str(t["id"]),
            str(t.get("round_index")),
            space,
            escape(describe_strategy(t["strategy"])),
            f"{pred:.3f}" if pred else "-",
            f"{t['median_time']:.3f}",
            *speed,
        )
    for t in trials:
        if t.get("baseline"):
            m = t.get("median_time")
            sync = t["strategy"].get("kind", "strategy") == "strategy"
            lossy = ("lossy" if is_lossy_baseline(t["baseline"]) else "lossless") if sync else "-"
            table.add_row(
                str(t["id"]),
                "base",
                lossy,
                t["baseline"],
                "-",
                f"{m:.3f}" if m else t["state"],
                *["" for _ in tuned],
            )
    return table


def honest_lines(status: dict[str, Any]) -> list[str]:
    """The search's space and, per space, its winner against that space's tuned baselines with the
    95 % interval of each ratio; a lossy winner carries its accuracy verdict (issue 14)."""
    s = status["search"]
    lines = [f"space: {s.get('space', 'lossless')} (compression {s.get('compression', 'none')})"]
    for f in status.get("families", []):
        tuned, untuned = f.get("tuned"), f.get("untuned")
        if tuned:
            base = (
                f"untuned {untuned['label']} {untuned['median']:.3f} s" if untuned else "untuned not measured"
            )
            lines.append(
                f"  tuned {f['family']}: {tuned['label']} {tuned['median']:.3f} s "
                f"(fastest of {f['measured']} measured; {base})"
            )
        else:
            lines.append(f"  tuned {f['family']}: no member measured yet")
    for rep in status.get("reports", []):
        w = rep.get("winner")
        if w is None:
            lines.append(f"{rep['space']} winner: none measured yet")
            continue
        verdict = "" if rep["space"] == "lossless" else f" [{rep['accuracy']}]"
        lines.append(f"{rep['space']} winner {w['label']}: {w['median']:.3f} s/iteration{verdict}")
        for r in rep.get("ratios", []):
            text = f"  {r['ratio']:.2f}x [95% {r['low']:.2f}-{r['high']:.2f}] vs tuned {r['family']} ({r['baseline']})"
            if r["ratio"] < 1:
                text += f": not faster; {r['baseline']} stays the choice (1.00x)"
            lines.append(text)
    return lines


def watch_search(
    client: StrategistClient, search_id: int, console: Console, interval_s: float = 1.0
) -> SearchStatusPublic:
    """Show a progress bar and the best-so-far table until the search ends; returns its final status."""
    progress = Progress(
        TextColumn("[bold]search {task.fields[sid]}[/] {task.fields[state]} round {task.fields[round]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("trials"),
        TimeElapsedColumn(),
        console=console,
    )
    if not console.is_terminal:  # piped to a file: one plain line per change, no live redraw
        seen: list[tuple[str, int, int]] = []

        def line(status: SearchStatusPublic) -> None:
            s = status.search
            now = (s.state, s.current_round, status.candidate_trials_done)
            if not seen or seen[-1] != now:
                seen.append(now)
                extra = f"; waiting for workers: {status.state_detail}" if status.state_detail else ""
                console.print(
                    escape(
                        f"search {search_id} {s.state} round {s.current_round}: "
                        f"{status.candidate_trials_done}/{s.trial_budget} candidate trials done{extra}"
                    ),
                    soft_wrap=True,
                )

        return client.wait(search_id, on_progress=line, interval_s=interval_s)
    budget = client.search(search_id).search.trial_budget
    task = progress.add_task("search", total=budget, sid=search_id, state="", round=0)
    with Live(console=console, refresh_per_second=4, transient=False) as live:

        def show(status: SearchStatusPublic) -> None:
            if status.search.plan_kind == "heterogeneous":
                table = costs_table(as_json(client.costs(search_id)))
            else:
                table = best_table(as_json(status), [as_json(t) for t in client.trials(search_id)])
            s = status.search
            progress.update(
                task, completed=status.candidate_trials_done, state=s.state, round=s.current_round
            )
            waiting = (
                [f"[red]waiting for workers:[/] {escape(status.state_detail)}"] if status.state_detail else []
            )
            live.update(Group(progress, *waiting, table))

        return client.wait(search_id, on_progress=show, interval_s=interval_s)


def _client(api: str, token: str) -> StrategistClient:
    if not token:
        typer.echo("error: --token: a user token is required (or set $STRATEGIST_TOKEN)", err=True)
        raise typer.Exit(2)
    return StrategistClient(api, token)


def _run(fn: Any) -> Any:
    try:
        return fn()
    except (ApiError, httpx.HTTPError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None


@search_app.command("create")
def create(
    model: Annotated[str, typer.Option(help="Model name (yours or the zoo's) or id.")],
    cluster: Annotated[str, typer.Option(help="Cluster name (yours or the zoo's) or id.")],
    budget: Annotated[int, typer.Option(help="Candidate trials in total.")] = 8,
    per_round: Annotated[int, typer.Option(help="K: candidates (trials) per round.")] = 4,
    samples: Annotated[int, typer.Option(help="M: strategies sampled and scored per round.")] = 200,
    objective: Annotated[
        str | None, typer.Option(help="'time' or 'cost' (default: time; cost for --plan heterogeneous).")
    ] = None,
    approval: Annotated[bool, typer.Option(help="Wait for approval before each round's trials.")] = False,
    seed: Annotated[int, typer.Option(help="Sampler seed.")] = 0,
    compression: Annotated[
        str,
        typer.Option(help="Lossy compression the search may use: none (lossless) | fp16 | powersgd | all."),
    ] = "none",
    name: Annotated[str, typer.Option(help="A label.")] = "",
    throughput_limit: Annotated[
        float | None,
        typer.Option(
            help="Samples/s a heterogeneous (HeterPS) plan must reach; with --objective cost, the search "
            "schedules layers to the cluster's priced resource types at the least money."
        ),
    ] = None,
    scheduler: Annotated[
        str,
        typer.Option(help="With --throughput-limit: exact | rl | greedy | bo-tpe | bo-gp | genetic | ..."),
    ] = "exact",
    plan: Annotated[
        str,
        typer.Option(
            help="What to plan: sync (AutoSync strategies) | pipeline | hybrid | heterogeneous "
            "(HeterPS: needs --throughput-limit; objective cost)."
        ),
    ] = "sync",
    stages: Annotated[
        str | None, typer.Option(help='--plan pipeline: number of stages, or "choose" (the default).')
    ] = None,
    memory_per_device_gb: Annotated[
        float | None, typer.Option(help="--plan pipeline: usable memory per device, GB (default 90 % of it).")
    ] = None,
    global_batch: Annotated[
        int | None, typer.Option(help="--plan pipeline|hybrid: samples per step over the cluster.")
    ] = None,
    annotate: Annotated[
        list[str] | None,
        typer.Option(help="--plan hybrid: MODULE=replicate|split[:DEVICES], repeatable (none: automatic)."),
    ] = None,
    fixed: Annotated[
        bool, typer.Option(help="--plan pipeline: trials run the (k, b) fixed, no tuner.")
    ] = False,
    space: Annotated[
        str | None,
        typer.Option(
            help="--plan hybrid: '3d' ranks TP x PP x DP plans with ZeRO and recompute (predicted only)."
        ),
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(help="--space 3d: GPUs of the first node (default all).")
    ] = None,
    zero_stages: Annotated[
        str | None, typer.Option(help="--space 3d: ZeRO stages to consider, e.g. 0,1,2,3 (default all).")
    ] = None,
    recompute: Annotated[
        str | None, typer.Option(help="--space 3d: recompute modes among none,selective,full (default all).")
    ] = None,
    micro_batches: Annotated[
        str | None, typer.Option(help="--space 3d: micro-batch sizes, e.g. 4,8 (default 1,2,4,8).")
    ] = None,
    fused_attention: Annotated[
        str | None, typer.Option(help="--space 3d: false, true or false,true (default false).")
    ] = None,
    heads: Annotated[
        int | None, typer.Option(help="--space 3d: attention heads (default hidden/64).")
    ] = None,
    as_json_out: Annotated[bool, typer.Option("--json", help="Print the created search as JSON.")] = False,
    api: ApiOpt = "http://127.0.0.1:8000",
    token: TokenOpt = "",
) -> None:
    """Create a search; prints its id."""
    if compression not in ("none", "fp16", "powersgd", "all"):
        typer.echo(
            f"error: --compression: must be none, fp16, powersgd or all, got {compression!r}", err=True
        )
        raise typer.Exit(2)
    if plan == "heterogeneous":
        if throughput_limit is None:
            typer.echo(
                "error: --throughput-limit: --plan heterogeneous needs the samples/s to reach", err=True
            )
            raise typer.Exit(2)
        objective = objective or "cost"
    objective = objective or "time"
    fields = {
        "model": model,
        "cluster": cluster,
        "trial_budget": budget,
        "candidates_per_round": per_round,
        "samples_per_round": samples,
        "objective": objective,
        "approval_required": approval,
        "seed": seed,
        "name": name,
        "compression": compression,
        **heterogeneous_fields(objective, throughput_limit, scheduler),
        **plan_fields(plan, stages, memory_per_device_gb, global_batch, annotate or (), fixed),
    }
    threed = threed_options(plan, space, gpus, zero_stages, recompute, micro_batches, fused_attention, heads)
    if threed:  # issue 42: the 3D space of a hybrid search
        if annotate:
            typer.echo("error: --annotate: Whale's TaskGraph plans; not with --space 3d", err=True)
            raise typer.Exit(2)
        fields["plan_options"] = {**fields["plan_options"], **threed}
    if plan not in ("sync", "heterogeneous") and throughput_limit is not None:
        typer.echo("error: --plan: a --throughput-limit search plans heterogeneous schedules", err=True)
        raise typer.Exit(2)
    options = {
        "trial_budget": "--budget",
        "candidates_per_round": "--per-round",
        "samples_per_round": "--samples",
    }
    try:
        body = SearchCreate.model_validate(fields)
    except ValidationError as e:  # checked here, before any request: name the option and the reason
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else ""
        option = options.get(field, "--" + field.replace("_", "-")) if field else "arguments"
        typer.echo(f"error: {option}: {err['msg']}", err=True)
        raise typer.Exit(2) from None
    client = _client(api, token)
    created = _run(lambda: client.create_search(body))
    typer.echo(json.dumps(as_json(created), indent=2) if as_json_out else str(created.id))


@search_app.command("status")
def status_cmd(
    search_id: Annotated[int, typer.Argument(help="Search id.")],
    as_json_out: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
    api: ApiOpt = "http://127.0.0.1:8000",
    token: TokenOpt = "",
) -> None:
    """Print a search's state, progress, best measured time and speed-ups."""
    client = _client(api, token)
    status = as_json(_run(lambda: client.search(search_id)))
    if as_json_out:
        typer.echo(json.dumps(status, indent=2))
        return
    s = status["search"]
    console = Console()
    if s.get("plan_kind") == "heterogeneous":
        print_costs(console, status, as_json(_run(lambda: client.costs(search_id))))
        for line in result_lines(status):
            console.print(escape(line))
        return
    trials = [as_json(t) for t in _run(lambda: client.trials(search_id))]
    console.print(  # escaped: "[pending]" and user-chosen names are text, not rich markup
        escape(
            f"search {search_id} [{s['state']}] {s['model_name']} on {s['cluster_name']}: "
            f"round {s['current_round']}, {status['candidate_trials_done']}/{s['trial_budget']} "
            "candidate trials done"
        )
    )
    console.print(best_table(status, trials))
    if s.get("plan_kind", "sync") == "sync":
        for line in honest_lines(status):
            console.print(escape(line))
    for line in result_lines(status):
        console.print(escape(line))
    if s.get("plan_kind") == "pipeline":
        from service.plans.pipeline import KB_MEANING

        console.print(escape(KB_MEANING), soft_wrap=True)
    for line in plan_lines(trials):  # pipeline / hybrid trials: chosen (k, b), switches, shares, busy
        console.print(escape(line))
    if is_3d_search(s):  # predicted only (issue 42): the ranking is the answer
        for line in ranking_text([as_json(c) for c in _run(lambda: client.candidates(search_id))]):
            console.print(escape(line), soft_wrap=True)


@search_app.command("watch")
def watch_cmd(
    search_id: Annotated[int, typer.Argument(help="Search id.")],
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 1.0,
    api: ApiOpt = "http://127.0.0.1:8000",
    token: TokenOpt = "",
) -> None:
    """Follow a search until it ends: a progress bar and the best-so-far table."""
    client = _client(api, token)
    final = _run(lambda: watch_search(client, search_id, Console(), interval))
    typer.echo(f"search {search_id} {final.search.state}")
    if final.search.plan_kind == "heterogeneous":
        for line in cost_lines(as_json(_run(lambda: client.costs(search_id)))):
            typer.echo(line)
    elif final.search.plan_kind == "sync":
        for line in honest_lines(as_json(final)):
            typer.echo(line)
    for line in result_lines(as_json(final)):
        typer.echo(line)
    if is_3d_search(as_json(final.search)):  # predicted only (issue 42): the ranking is the answer
        for line in ranking_text([as_json(c) for c in _run(lambda: client.candidates(search_id))]):
            typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add the ``strategist search`` group to the root app."""
    app.add_typer(search_app, name="search")
