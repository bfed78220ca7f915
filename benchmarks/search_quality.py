"""Search quality at equal budgets of simulated evaluations, and sampler throughput.

Run:   python benchmarks/search_quality.py [--models VGG16,BERT-base,NCF-sparse] [--clusters A2,B7]
           [--budgets 50,200,1000] [--seeds 5] [--searchers random,autosync-s,autosync,tpe,cmaes]
           [--tpe-max-budget 200] [--results out.json] [--report out.json]

The evaluator is the analytical cost model (AutoSync Eq. 1-3). A budget B is B strategies asked
(in batches of ``--batch``), scored and told back; each searcher's best-so-far is read at every
budget of the list from one run of the largest budget. Searchers are told T_sync, the
synchronisation time: with data parallelism T_comp is the same for every strategy of a
(model, cluster), and the iteration time T = max(T_comp, T_sync) (Eq. 1) is a monotone function of
T_sync, so the strategy with the best T_sync also has the best T. Telling T itself would hide every
difference below T_comp (most strategies of VGG16 and BERT-base are compute-bound under this model)
from the model-based searchers. Both are reported, as ratios to the Horovod and PS baselines of
``simulator.analytical.baselines`` (below 1 = better than the baseline).

AutoSync's own simulator is the same analytical model (a perfect simulator here): its pool of
``pool_factor`` x batch constrained draws per round is scored by it and *not* counted in the
budget — the budget counts trials (told results), as in the paper, where simulation is cheap
and trials are not. So the AutoSync column is an upper bound for a learned simulator; AutoSync(-s)
is the same sampler without simulator or selection.

Throughput: strategies per CPU-second (time.process_time, best of 2) of each sampler with the
memory check on, 100 draws per run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from rich.console import Console
from rich.table import Table

from search import make_sampler
from search.searchers import (
    AutoSyncConfig,
    AutoSyncSearcher,
    CMAESSearcher,
    ConstrainedSearcher,
    RandomSearcher,
    Searcher,
    TPESearcher,
)
from simulator import zoo
from simulator.analytical import AnalyticalSimulator
from simulator.analytical.baselines import baseline
from simulator.spec import ClusterSpec, ModelSpec

SIM = AnalyticalSimulator()
AUTOSYNC = AutoSyncConfig(pool_factor=5, pool_min=0)  # the round itself: search.round.DEFAULTS

MAKERS: dict[str, Callable[[ModelSpec, ClusterSpec, int], Searcher]] = {
    "random": lambda m, c, s: RandomSearcher(m, c, s),
    "autosync-s": lambda m, c, s: ConstrainedSearcher(m, c, s),
    "autosync": lambda m, c, s: AutoSyncSearcher(m, c, SIM, s, AUTOSYNC),
    "tpe": lambda m, c, s: TPESearcher(m, c, s),
    "cmaes": lambda m, c, s: CMAESSearcher(m, c, s),
}


def times(model: ModelSpec, cluster: ClusterSpec, strategies: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(T, T_sync) of each strategy, seconds."""
    s = SIM.score_batch(model, cluster, SIM.encode(model, cluster, strategies))
    return s.t_iter, s.t_sync


def run_one(
    kind: str, model: ModelSpec, cluster: ClusterSpec, seed: int, budgets: list[int], batch: int
) -> dict[str, Any]:
    """Best T and T_sync after each budget for one searcher and seed."""
    searcher = MAKERS[kind](model, cluster, seed)
    best_t, best_sync = np.inf, np.inf
    out: dict[str, Any] = {"t": {}, "sync": {}}
    told = 0
    start = time.process_time()
    for budget in budgets:
        while told < budget:
            asked = searcher.ask(min(batch, budget - told))
            t, sync = times(model, cluster, asked)
            searcher.tell(asked, sync.tolist())
            best_t, best_sync = min(best_t, float(t.min())), min(best_sync, float(sync.min()))
            told += len(asked)
        out["t"][budget], out["sync"][budget] = best_t, best_sync
    out["cpu_s"] = time.process_time() - start
    return out


def throughput(model: ModelSpec, cluster: ClusterSpec, kind: str, n: int = 100) -> float:
    best = np.inf
    for r in range(2):
        sampler = make_sampler(kind, model, cluster, seed=r)  # type: ignore[arg-type]
        start = time.process_time()
        sampler.sample(n)
        best = min(best, time.process_time() - start)
    return n / best


def collect(args: argparse.Namespace) -> dict[str, Any]:
    budgets = sorted(int(b) for b in args.budgets.split(","))
    results: dict[str, Any] = {"budgets": budgets, "domains": []}
    for model_name in args.models.split(","):
        model = zoo.model(model_name)
        for cluster_name in args.clusters.split(","):
            cluster = zoo.cluster(cluster_name)
            base = {n: baseline(n, model, cluster) for n in ("horovod", "ps")}
            t, sync = times(model, cluster, list(base.values()))
            domain: dict[str, Any] = {
                "model": model_name,
                "cluster": cluster_name,
                "t_comp": float(
                    SIM.score_batch(model, cluster, SIM.encode(model, cluster, [base["ps"]])).t_comp[0]
                ),
                "baselines": {n: {"t": float(t[i]), "sync": float(sync[i])} for i, n in enumerate(base)},
                "throughput": {
                    k: throughput(model, cluster, k) for k in ("random", "constrained") if args.throughput
                },
                "runs": {},
            }
            results["domains"].append(domain)
            for kind in args.searchers.split(","):
                bs = [b for b in budgets if kind != "tpe" or b <= args.tpe_max_budget]
                domain["runs"][kind] = [
                    run_one(kind, model, cluster, seed, bs, args.batch) for seed in range(args.seeds)
                ]
                cpu = sum(r["cpu_s"] for r in domain["runs"][kind])
                print(f"{model_name} {cluster_name} {kind}: {cpu:.0f} CPU s", flush=True)
                if args.results:  # after every searcher, so a long run can be reported part-way
                    Path(args.results).write_text(json.dumps(results, indent=1))
    return results


def _ratio(values: list[float], ref: float) -> str:
    r = [v / ref for v in values]
    return f"{statistics.mean(r):.3f}±{statistics.pstdev(r):.3f}"


def report(results: dict[str, Any]) -> None:
    console = Console(width=200)
    budgets = results["budgets"]
    for metric, title in (("sync", "T_sync (synchronisation time)"), ("t", "T = max(T_comp, T_sync)")):
        table = Table(title=f"Best {title} found / baseline's, mean±sd over seeds (lower is better)")
        for col in (
            "model",
            "cluster",
            "searcher",
            *(f"B={b} /hvd" for b in budgets),
            *(f"B={b} /ps" for b in budgets),
        ):
            table.add_column(col, justify="right")
        for d in results["domains"]:
            hvd, ps = d["baselines"]["horovod"][metric], d["baselines"]["ps"][metric]
            for kind, runs in d["runs"].items():
                cells = []
                for ref in (hvd, ps):
                    for b in budgets:
                        vals = [r[metric].get(str(b), r[metric].get(b)) for r in runs]
                        vals = [] if None in vals else vals
                        cells.append(_ratio(vals, ref) if vals else "—")
                table.add_row(d["model"], d["cluster"], kind, *cells)
            table.add_section()
        console.print(table)
    table = Table(title="Baselines (ms) and sampler throughput (strategies per CPU-second, memory check on)")
    for col in (
        "model",
        "cluster",
        "T_comp",
        "horovod T_sync",
        "ps T_sync",
        "random /s",
        "constrained /s",
        "searcher CPU s (all seeds)",
    ):
        table.add_column(col, justify="right")
    for d in results["domains"]:
        b = d["baselines"]
        cpu = ", ".join(f"{k} {sum(r['cpu_s'] for r in runs):.0f}" for k, runs in d["runs"].items())
        table.add_row(
            d["model"],
            d["cluster"],
            f"{d['t_comp'] * 1e3:.1f}",
            f"{b['horovod']['sync'] * 1e3:.1f}",
            f"{b['ps']['sync'] * 1e3:.1f}",
            f"{d['throughput'].get('random', float('nan')):.0f}",
            f"{d['throughput'].get('constrained', float('nan')):.0f}",
            cpu,
        )
    console.print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="VGG16,BERT-base,NCF-sparse")
    p.add_argument("--clusters", default="A2,B7")
    p.add_argument("--budgets", default="50,200,1000")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--batch", type=int, default=10, help="Strategies per ask.")
    p.add_argument("--searchers", default=",".join(MAKERS))
    p.add_argument("--tpe-max-budget", type=int, default=200, help="TPE's cost grows with trials x params.")
    p.add_argument("--no-throughput", dest="throughput", action="store_false", help="Skip it.")
    p.add_argument("--results", default="", help="Write raw results (JSON) here as domains finish.")
    p.add_argument("--report", default="", help="Only print the tables of results files (a,b,...).")
    args = p.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.report:
        parts = [json.loads(Path(f).read_text()) for f in args.report.split(",")]
        budgets = sorted({b for r in parts for b in r["budgets"]})
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        for d in (d for r in parts for d in r["domains"]):  # one domain may be split over files
            into = merged.setdefault((d["model"], d["cluster"]), d)
            if into is not d:
                into["runs"].update(d["runs"])
                into["throughput"] = into["throughput"] or d["throughput"]
        report({"budgets": budgets, "domains": list(merged.values())})
        return
    report(collect(args))


if __name__ == "__main__":
    main()
