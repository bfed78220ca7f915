"""`strategist simulator train|eval|list`: learned simulator versions from measured runtimes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from service.settings import Settings

# simulator.learned pulls in torch and torch-geometric (seconds): imported by the commands that
# need it, so that every other `strategist` command starts fast.
if TYPE_CHECKING:
    from simulator.learned import Domain, Registry

simulator_app = typer.Typer(
    help="Learned simulators: train, evaluate and list versions.", no_args_is_help=True
)

RUNTIMES_HELP = "Folder of <model>__<cluster>/*.jsonl runtime records (default: datasets/runtimes)."
REGISTRY_HELP = "Folder of simulator versions (default: the service's simulators_dir)."


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _registry(path: Path | None) -> Registry:
    from simulator.learned import Registry

    return Registry(path if path is not None else Settings().simulators_path)


def _domains(runtimes_dir: Path | None, names: list[str] | None) -> list[Domain]:
    from simulator.learned.runtimes import default_runtimes_dir, load_runtimes

    root = runtimes_dir or default_runtimes_dir()
    try:
        domains = load_runtimes(root, names)
    except KeyError as e:
        raise _fail(f"--domain: {str(e).strip(chr(34) + chr(39))}") from None
    except ValueError as e:
        raise _fail(str(e)) from None
    if not domains:
        raise _fail(f"--runtimes-dir: no runtime records under {root}")
    return domains


@simulator_app.command("train")
def train(
    domain: list[str] = typer.Option(None, "--domain", help="Domain <model>__<cluster>; repeatable."),
    all_domains: bool = typer.Option(False, "--all", help="Train one simulator on every measured domain."),
    kind: str = typer.Option("rnn", "--kind", help="rnn, gat or linear."),
    loss: str = typer.Option("rank", "--loss", help="rank (pairwise) or mse (log time)."),
    epochs: int = typer.Option(200, "--epochs", min=1, help="Training epochs (AutoSync §10: 200)."),
    seed: int = typer.Option(0, "--seed", help="Initialisation seed."),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the 70/15/15 split."),
    runtimes_dir: Path = typer.Option(None, "--runtimes-dir", help=RUNTIMES_HELP),
    registry_dir: Path = typer.Option(None, "--registry-dir", help=REGISTRY_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the new version's metadata as JSON."),
) -> None:
    """Train a simulator on measured runtimes and save it as a new version."""
    from simulator.learned import TrainConfig, train_version
    from simulator.learned.train import KINDS

    if kind not in KINDS:
        raise _fail(f"--kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    if loss not in ("rank", "mse"):
        raise _fail(f"--loss: must be rank or mse, got {loss!r}")
    if bool(domain) == all_domains:
        raise _fail("--domain/--all: give one or more --domain, or --all")
    domains = _domains(runtimes_dir, None if all_domains else list(domain))
    cfg = TrainConfig(kind=kind, loss=loss, epochs=epochs, seed=seed)  # type: ignore[arg-type]
    info = train_version(domains, _registry(registry_dir), cfg, split_seed=split_seed)
    if as_json:
        typer.echo(json.dumps(info.as_dict(), indent=2))
        return
    typer.echo(f"saved {info.version}")
    for name, splits in info.metrics.items():
        test = splits.get("test", {})
        typer.echo(f"  {name}: test pairwise accuracy {test.get('pairwise_accuracy')}")


@simulator_app.command("eval")
def evaluate_cmd(
    domain: list[str] = typer.Option(None, "--domain", help="Only these domains; repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    train_missing: bool = typer.Option(
        True, "--train-missing/--no-train-missing", help="Train kinds that have no version yet."
    ),
    epochs: int = typer.Option(200, "--epochs", min=1, help="Epochs when training a missing kind."),
    split_seed: int = typer.Option(0, "--split-seed", help="Split seed for the analytical model."),
    runtimes_dir: Path = typer.Option(None, "--runtimes-dir", help=RUNTIMES_HELP),
    registry_dir: Path = typer.Option(None, "--registry-dir", help=REGISTRY_HELP),
) -> None:
    """Ranking metrics of analytical, linear, rnn and gat on each domain's test split."""
    from simulator.learned import TrainConfig
    from simulator.learned.evaluation import eval_report

    domains = _domains(runtimes_dir, list(domain) if domain else None)
    report = eval_report(
        domains,
        _registry(registry_dir),
        split_seed=split_seed,
        train_missing=train_missing,
        config=TrainConfig(epochs=epochs),
    )
    if as_json:
        typer.echo(json.dumps(report))
        return
    table = Table("domain", "kind", "pairwise acc", "kendall tau", "top-5 regret")
    for name, kinds in report["domains"].items():
        for kind, m in kinds.items():
            table.add_row(
                name, kind, *(_num(m[k]) for k in ("pairwise_accuracy", "kendall_tau", "top5_regret"))
            )
    Console().print(table)


@simulator_app.command("list")
def list_cmd(
    domain: str = typer.Option(None, "--domain", help="Only versions trained on this domain."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    registry_dir: Path = typer.Option(None, "--registry-dir", help=REGISTRY_HELP),
) -> None:
    """Saved simulator versions, oldest first."""
    versions = _registry(registry_dir).list(domain=domain)
    if as_json:
        typer.echo(json.dumps([v.as_dict() for v in versions]))
        return
    table = Table("version", "kind", "loss", "domains", "created")
    for v in versions:
        table.add_row(v.version, v.kind, v.loss, ", ".join(v.domain_names), v.created_at)
    Console().print(table)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def register(app: typer.Typer) -> None:
    app.add_typer(simulator_app, name="simulator")
