"""Honest speed-ups over the collected domains (issue 14): like against like, tuned baselines, intervals.

    python benchmarks/speedup_honest.py [--data datasets/runtimes] [--accuracy] [--steps 120]

For every domain folder under ``datasets/runtimes`` it reads the measured records (nothing is
simulated) and prints:

- the best measured *lossless* strategy (sampled strategies and baselines alike) against the
  tuned Horovod family and the tuned PS family: "tuned" is the fastest measured member of the
  family **present in the records**. The collections measured these baselines, no more:
  Horovod family = ``horovod`` (fusion threshold and hierarchical switch tuned by TPE on the
  *analytical* T_sync) and ``allreduce-single`` (one bucket: Horovod with an unbounded fusion
  threshold); PS family = ``ps`` (partition threshold tuned by TPE on the analytical model) and
  ``ps-naive``. The measured grids of ``search.baselines`` (fusion 1/4/16/64 MiB, PS variants)
  were not part of these collections, so "tuned" here is weaker than a search's tuned baseline;
- the best lossless strategy may itself be a baseline (then "vs tuned horovod" is 1.00x, "the
  baseline itself", and "vs tuned ps" is what choosing that Horovod member gains over PS);
- the ratio tuned-baseline median / best median with its 95 % bootstrap interval over the two
  trials' iteration times (``search.speedup.bootstrap_ratio``), and the speed-up strategist offers:
  max(1, ratio), i.e. 1.00x where nothing measured beats the baseline (you keep the baseline);
- the best *lossy* strategy (fp16 / PowerSGD) against lossy baselines: none were measured in
  these collections, so no lossy speed-up is claimed; with ``--accuracy`` the lossy winner's
  compressors get the time-to-accuracy check (``runtime.accuracy``, teacher task on the executor,
  real compute, loopback) against the lossless all-reduce, using the domain's measured step times
  (lossy winner vs the fastest tuned lossless baseline); without it the winner is
  "lossy, accuracy not verified".

Records are those of ``datasets/runtimes`` as they are now: the collection of 2026-11-22 (4
measured iterations per trial, before the issue-13 measurement protocol: no per-iteration barrier,
no overhead probe, no time dilation). The script says so when the records lack the new protocol's
fields; its numbers will change when the re-collection lands.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from search.baselines import family_of
from search.space import space_of
from search.speedup import bootstrap_ratio
from simulator import zoo
from simulator.spec import Strategy, split_domain
from simulator.spec.records import load_trials

ROOT = Path(__file__).resolve().parents[1]
#: Baseline names of the 2026-11-22 collections and their family; members of the measured families
#: of ``search.baselines`` (``horovod@16MiB``, ``ps@balanced``, ``horovod-fp16@1MiB`` ...) are
#: recognised too, should a collection measure them.
LEGACY = {"horovod": "horovod", "allreduce-single": "horovod", "ps": "ps", "ps-naive": "ps"}
LOSSY_FAMILIES = ("horovod-fp16", "ddp-powersgd")


def family(name: str) -> str:
    return LEGACY.get(name, family_of(name))


#: A cluster with more workers than this runs the accuracy proxy on 2 nodes x 2 GPUs instead.
MAX_ACCURACY_WORKERS = 8


@dataclass(frozen=True)
class Run:
    label: str
    strategy: Strategy
    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.times))


def domain_runs(folder: Path) -> tuple[dict[str, Run], list[Run], list[Run], bool]:
    """(baselines by name, lossless sampled, lossy sampled, records carry the new protocol)."""
    baselines: dict[str, Run] = {}
    lossless: list[Run] = []
    lossy: list[Run] = []
    new_protocol = True
    for r in load_trials(folder):
        if not r.get("ok"):
            continue
        times = tuple(float(t) for t in r["measurement"]["iteration_times"])
        if not times:
            continue
        env = r["measurement"].get("environment", {})
        new_protocol &= "dilation" in env or "probe" in r["measurement"]
        s = Strategy.model_validate(r["strategy"])
        run = Run(r["source"], s, times)
        if r.get("baseline"):
            baselines[r["source"].removeprefix("baseline:")] = run
        else:
            (lossless if space_of(s) == "lossless" else lossy).append(run)
    return baselines, lossless, lossy, new_protocol


def _ratio(base: Run, best: Run) -> str:
    """'offered (ratio [low, high])'; the baseline itself is 1.00x with no interval."""
    if base is best:
        return "1.00x (the baseline itself is the best)"
    ratio = base.median / best.median
    lo, hi = bootstrap_ratio(base.times, best.times)
    flag = "; interval includes 1" if lo <= 1.0 <= hi else ""
    return f"{max(1.0, ratio):.2f}x ({ratio:.2f} [{lo:.2f}, {hi:.2f}]{flag})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=ROOT / "datasets" / "runtimes")
    ap.add_argument(
        "--accuracy", action="store_true", help="Run the time-to-accuracy check of lossy winners."
    )
    ap.add_argument("--steps", type=int, default=120, help="Steps of each time-to-accuracy run.")
    args = ap.parse_args()
    console = Console(width=220)
    table = Table(
        title="honest speed-ups per domain (measured; offered = max(1, ratio); ratio [95% bootstrap])"
    )
    for col in ("domain", "ok (lossless/lossy)", "best lossless s", "tuned horovod", "vs tuned horovod",
                "tuned ps", "vs tuned ps", "best lossy s", "lossy vs lossy", "lossy accuracy"):  # fmt: skip
        table.add_column(col, overflow="fold")
    old = []
    notes: list[str] = []
    summary: list[str] = []
    for folder in sorted(p for p in args.data.iterdir() if p.is_dir()):
        baselines, lossless, lossy, new_protocol = domain_runs(folder)
        if not new_protocol:
            old.append(folder.name)
        lossless_all = lossless + [b for b in baselines.values() if space_of(b.strategy) == "lossless"]
        if not lossless_all:
            continue
        best = min(lossless_all, key=lambda r: r.median)
        cells = [folder.name, f"{len(lossless)}/{len(lossy)}", f"{best.median:.4f} ({best.label})"]
        tuned_all = []
        for fam in ("horovod", "ps"):
            present = [b for n, b in baselines.items() if family(n) == fam]
            if not present:
                cells += ["not measured", "-"]
                continue
            tuned = min(present, key=lambda r: r.median)
            tuned_all.append(tuned)
            got = ", ".join(f"{r.label.removeprefix('baseline:')} {r.median:.4f}" for r in present)
            cells += [f"{tuned.label.removeprefix('baseline:')} (of {got})", _ratio(tuned, best)]
            if (
                {"ps", "ps-naive"} <= baselines.keys()
                and fam == "ps"
                and (baselines["ps"].median > baselines["ps-naive"].median)
            ):
                notes.append(f"{folder.name}: analytically tuned 'ps' is slower than 'ps-naive' (measured)")
        if lossy:
            winner = min(lossy, key=lambda r: r.median)
            lossy_tuned = [
                min(ms, key=lambda r: r.median)
                for fam in LOSSY_FAMILIES
                if (ms := [b for n, b in baselines.items() if family(n) == fam])
            ]
            vs = "; ".join(f"vs {t.label}: {_ratio(t, winner)}" for t in lossy_tuned)
            cells += [f"{winner.median:.4f} ({winner.label})", vs or "no lossy baseline measured: no claim"]
            cells.append(_accuracy(folder.name, winner, tuned_all, args.steps) if args.accuracy else
                          "lossy, accuracy not verified")  # fmt: skip
        else:
            cells += ["-", "-", "-"]
        table.add_row(*cells)
        summary.append(f"{folder.name}: " + " | ".join(c.replace("\n", " ") for c in cells[2:]))
    if old:
        console.print(
            f"[bold]Records are the old dataset[/] ({', '.join(old)}): measured before the issue-13 "
            "protocol (no per-iteration barrier, overhead probe or dilation); 4 iterations per trial. "
            "These numbers will change when the re-collection lands."
        )
    console.print(table)
    for n in notes:
        console.print(f"  note: {n}")
    console.print("\nper domain, one line (best lossless | tuned horovod | vs it | tuned ps | vs it | best lossy | "
                  "lossy vs lossy | lossy accuracy):")  # fmt: skip
    for line in summary:
        console.print(f"  {line}", soft_wrap=True)


def _accuracy(domain: str, winner: Run, tuned: list[Run], steps: int) -> str:
    from runtime.accuracy import time_to_accuracy
    from runtime.executor.reference import two_by_two

    cluster = zoo.cluster(split_domain(domain)[1])
    where = cluster.name
    if cluster.num_gpus > MAX_ACCURACY_WORKERS:
        cluster, where = two_by_two(), f"2x2 (not {cluster.name}: too many processes for real compute here)"
    base = min(tuned, key=lambda r: r.median) if tuned else None
    check = time_to_accuracy(
        winner.strategy, cluster, steps=steps, step_times=(base.median, winner.median) if base else None
    )
    return f"{check.verdict()} [teacher task on {where}; vs {base.label if base else 'n/a'}]"


if __name__ == "__main__":
    main()
