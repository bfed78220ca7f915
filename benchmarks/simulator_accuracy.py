"""Benchmark: how well each simulator ranks measured runtimes, in-domain and on unseen domains.

Per measured domain (``datasets/runtimes/<model>__<cluster>``), on its test split (70/15/15,
split seeded per run), mean ± std over seeds:
  - analytical: Eqs. 1-3 with default constants, and with φ/δ/efficiency fitted on the train split;
  - linear (pairwise logistic), RNN and GAT (ranking loss and MSE on log time), trained in-domain
    (model selection on the validation split only);
  - transfer: linear/RNN/GAT trained on the *other* domains, tested on this one with 0 points of
    it, then fine-tuned with 10 and 30 of its train-split points (fixed epochs, no selection);
  - pre-trained (``--pretrain N``): the same RNN/GAT runs, first trained on N strategies per
    domain drawn by the samplers and labelled by the analytical model (φ/δ/efficiency fitted on
    the measured train split of that domain; default constants for a held-out transfer target,
    of which nothing measured is used). Shown as "(rank, analytical pre-training)"; those labels
    are never scored, only measured test splits are;
  - noise: pairwise agreement between each record's median and a bootstrap re-draw of its
    iterations (how consistently the measurement itself orders pairs; a rough ceiling).
Plus inference speed (strategies/s, batched, CPU, one thread, features included).

    python benchmarks/simulator_accuracy.py --seeds 3 --epochs 200 --jobs 2 --out results.jsonl

The 2026-11-22 run (in-domain at the full recipe; transfer at 100 epochs, RNN transfer at 50 and one
seed) is in ``benchmarks/results/simulator_accuracy-2026-11-22.{jsonl,txt}``.

Every finished task is appended to ``--out`` as one JSON line; ``--table-only`` prints the table
from such a file (useful while a long run is going). Only measured runtimes are used.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch

from search import make_sampler
from search.space import SpaceConfig, compressor_kinds
from simulator.analytical import AnalyticalSimulator
from simulator.learned.data import Domain, EncodedDomain, encode
from simulator.learned.evaluation import analytical_metrics, fitted_params
from simulator.learned.linear import fit_linear
from simulator.learned.pretrain import analytical_labelled, pretrain
from simulator.learned.runtimes import default_runtimes_dir, domain_folders, load_runtimes
from simulator.learned.simulator import NeuralSimulator
from simulator.learned.train import TrainConfig, evaluate, fine_tune, fit, make_net
from simulator.metrics import pairwise_accuracy
from simulator.spec.records import read_records

Task = dict[str, Any]
_DATA: dict[str, Any] = {}


def _init(path: str) -> None:
    torch.set_num_threads(1)
    with open(path, "rb") as f:
        _DATA.update(pickle.load(f))


def _splits(name: str, seed: int) -> tuple[EncodedDomain, EncodedDomain, EncodedDomain]:
    enc: EncodedDomain = _DATA["encoded"][name]
    idx = _DATA["splits"][name][seed]
    return enc.subset(idx[0]), enc.subset(idx[1]), enc.subset(idx[2])


def _config(task: Task) -> TrainConfig:
    ep = task["epochs"]
    return TrainConfig(
        kind=task["kind"],
        loss=task["loss"],
        epochs=ep,
        milestones=(round(ep * 0.4), round(ep * 0.8)),  # 80/160 of 200 (AutoSync §10), scaled
        seed=task["seed"],
        batch_size=task["batch_size"],
        hidden=task["hidden"],
    )


def _labelled(names: list[str], seed: int, target: str | None) -> list[EncodedDomain]:
    """Analytical-label sets of ``names`` (the transfer ``target``'s with default constants)."""
    return [_DATA["labelled"][n]["default" if n == target else seed] for n in names]


def run_task(task: Task) -> list[dict[str, Any]]:
    """One training (and its fine-tunes) → result rows."""
    cfg = _config(task)
    name, seed = task["domain"], task["seed"]
    train, val, test = _splits(name, seed)
    pre = task.get("pretrain_epochs", 0)
    base = {k: task[k] for k in ("domain", "kind", "seed")}
    base["loss"] = f"{task['loss']}, analytical pre-training" if pre else task["loss"]
    start = time.time()
    if task["setting"] == "in-domain":
        init = pretrain(_labelled([name], seed, None), cfg, pre) if pre else None
        sim = fit([train], [val], cfg, start=init).simulator
        return [
            {**base, "setting": "in-domain", "train_s": time.time() - start, **evaluate(sim, test).as_dict()}
        ]
    others = [o for o in _DATA["encoded"] if o != name]
    src = [_splits(o, seed) for o in others]
    init = pretrain(_labelled([*others, name], seed, name), cfg, pre) if pre else None
    sim = fit([s[0] for s in src], [s[1] for s in src], cfg, start=init).simulator
    rows = [
        {**base, "setting": "transfer-0", "train_s": time.time() - start, **evaluate(sim, test).as_dict()}
    ]
    rng = np.random.default_rng(seed)
    for k in (10, 30):
        if len(train) < k:
            continue
        few = train.subset(rng.choice(len(train), k, replace=False))
        tuned = fine_tune(sim, [s[0] for s in src], few, cfg, epochs=max(10, task["epochs"] // 4))
        rows.append({**base, "setting": f"transfer-{k}", **evaluate(tuned, test).as_dict()})
    return rows


def labelled_sets(domain: Domain, n: int, seeds: int) -> dict[int | str, EncodedDomain]:
    """Pre-training sets of ``domain``: n sampled strategies (half random, half constrained),
    labelled by Eqs. 1-3 with constants fitted on each seed's measured train split, and with the
    default constants ("default", for when the domain is a held-out transfer target)."""
    space = SpaceConfig(compressors=compressor_kinds("all"))  # the measured data covers every compressor
    strategies = make_sampler("random", domain.model, domain.cluster, seed=10_001, space=space).sample(n // 2)
    strategies += make_sampler("constrained", domain.model, domain.cluster, seed=10_002, space=space).sample(
        n - n // 2
    )
    out: dict[int | str, EncodedDomain] = {
        "default": analytical_labelled(domain.model, domain.cluster, strategies)
    }
    for s in range(seeds):
        params = fitted_params(domain.split(s)[0])
        out[s] = analytical_labelled(domain.model, domain.cluster, strategies, params)
    return out


def noise_agreement(folder_files: list[Path], reps: int = 20, seed: int = 0) -> float:
    """Pairwise agreement of measured medians with bootstrap re-draws of their own iterations."""
    rng = np.random.default_rng(seed)
    its = []
    for path in folder_files:
        for rec in read_records(path):
            times = (rec.get("measurement") or {}).get("iteration_times") or []
            if rec.get("ok") and times:
                its.append(np.asarray(times, dtype=np.float64))
    med = np.array([np.median(t) for t in its])
    accs = [
        pairwise_accuracy(np.array([np.median(rng.choice(t, len(t))) for t in its]), med) for _ in range(reps)
    ]
    return float(np.mean(accs))


def inference_speed(domain: Domain, n: int = 512) -> dict[str, float]:
    """Strategies per second of predict() (features included), batched, one CPU thread."""
    torch.set_num_threads(1)
    strategies = [domain.strategies[i % len(domain)] for i in range(n)]
    enc = encode(domain)
    sims: dict[str, Any] = {"analytical": AnalyticalSimulator(), "linear": fit_linear([enc], [])}
    for kind in ("rnn", "gat"):
        net = make_net(kind, 32)
        net.fit_normaliser(enc.graphs)
        sims[kind] = NeuralSimulator(net, "rank")
    out = {}
    for name, sim in sims.items():
        sim.predict(domain.model, domain.cluster, strategies[:8])
        t = time.perf_counter()
        sim.predict(domain.model, domain.cluster, strategies)
        out[name] = n / (time.perf_counter() - t)
    return out


def _fmt(vals: list[float | None]) -> str:
    v = np.array([x for x in vals if x is not None and np.isfinite(x)], dtype=np.float64)
    if not len(v):
        return "-"
    return f"{v.mean():.3f} ± {v.std():.3f}" if len(v) > 1 else f"{v.mean():.3f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    speed = [r for r in rows if r["setting"] == "speed"]
    rows = [r for r in rows if r["setting"] != "speed"]
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["domain"], r["setting"], r["kind"], r.get("loss", "-"))].append(r)
    order = {"noise": 0, "in-domain": 1, "transfer-0": 2, "transfer-10": 3, "transfer-30": 4}
    head = f"{'domain':22s} {'setting':12s} {'simulator':38s} {'n':>3s} {'pairwise acc':>15s} {'kendall tau':>15s} {'top-5 regret':>15s} {'train s':>8s}"
    print(head)
    print("-" * len(head))
    for key in sorted(groups, key=lambda k: (k[0], order.get(k[1], 9), k[2], k[3])):
        g = groups[key]
        sim = key[2] if key[3] in ("-", "") else f"{key[2]} ({key[3]})"
        print(
            f"{key[0]:22s} {key[1]:12s} {sim:38s} {len(g):3d} {_fmt([r.get('pairwise_accuracy') for r in g]):>15s} "
            f"{_fmt([r.get('kendall_tau') for r in g]):>15s} {_fmt([r.get('top5_regret') for r in g]):>15s} "
            f"{_fmt([r.get('train_s') for r in g]):>8s}"
        )
    for r in speed:
        print(f"inference speed on {r['domain']} (batch 512, 1 CPU thread, features included): "
              f"{r['kind']} {r['strategies_per_s']:.0f} strategies/s")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtimes-dir", type=Path, default=None)
    p.add_argument("--domains", nargs="*", default=None)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--rnn-epochs", type=int, default=None, help="Epochs for the RNN (default --epochs).")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--kinds", default="linear,gat,rnn")
    p.add_argument("--losses", default="rank,mse")
    p.add_argument("--transfer", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--settings",
        default="baselines,in-domain,transfer",
        help="Which parts to run: baselines (noise, analytical, speed), in-domain, transfer.",
    )
    p.add_argument(
        "--pretrain-settings",
        default="in-domain,transfer",
        help="Settings that also get the --pretrain variant.",
    )
    p.add_argument(
        "--pretrain",
        type=int,
        default=0,
        help="Also run RNN/GAT pre-trained on this many analytically labelled strategies per domain.",
    )
    p.add_argument("--pretrain-epochs", type=int, default=20)
    p.add_argument("--pretrain-only", action="store_true", help="Run only the pre-trained variants.")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("simulator_accuracy.jsonl"))
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args()
    if args.table_only:
        print_table([json.loads(line) for line in args.out.read_text().splitlines() if line.strip()])
        return
    root = args.runtimes_dir or default_runtimes_dir()
    domains = [d for d in load_runtimes(root, args.domains) if len(d) >= 20]
    folders = {f.name: f for f in domain_folders(root)}
    rows: list[dict[str, Any]] = []
    out = args.out.open("a")

    def emit(new: list[dict[str, Any]]) -> None:
        for r in new:
            rows.append(r)
            out.write(json.dumps(r) + "\n")
        out.flush()

    kinds = args.kinds.split(",")
    parts = set(args.settings.split(","))
    if unknown := parts - {"baselines", "in-domain", "transfer"}:
        p.error(f"--settings: unknown {sorted(unknown)}")
    if "baselines" in parts:
        speed_domain = max(domains, key=lambda d: len(d.model.variables))
        speed = inference_speed(speed_domain)
        emit([{"domain": speed_domain.name, "setting": "speed", "kind": k, "loss": "-", "seed": 0,
               "strategies_per_s": v} for k, v in speed.items()])  # fmt: skip
    data: dict[str, dict[str, Any]] = {"encoded": {}, "splits": {}, "labelled": {}}
    for d in domains:
        if args.pretrain:
            data["labelled"][d.name] = labelled_sets(d, args.pretrain, args.seeds)
        enc = encode(d)
        data["encoded"][d.name] = enc
        index = {k: i for i, k in enumerate(d.keys)}
        data["splits"][d.name] = [
            [[index[k] for k in part.keys] for part in d.split(s)] for s in range(args.seeds)
        ]
        if "baselines" not in parts:
            continue
        emit([{"domain": d.name, "setting": "noise", "kind": "bootstrap", "loss": "-", "seed": 0,
               "pairwise_accuracy": noise_agreement(list(folders[d.name].files))}])  # fmt: skip
        for s in range(args.seeds):
            train, _, test = d.split(s)
            for fitted, label in ((False, "analytical-default"), (True, "analytical-fitted")):
                m = analytical_metrics(train, test, fitted=fitted)
                emit(
                    [
                        {
                            "domain": d.name,
                            "setting": "in-domain",
                            "kind": label,
                            "loss": "-",
                            "seed": s,
                            **m.as_dict(),
                        }
                    ]
                )
    tasks: list[Task] = []
    for kind in kinds:
        losses = ["rank"] if kind == "linear" else args.losses.split(",")
        for loss in losses:
            epochs = args.rnn_epochs if (kind == "rnn" and args.rnn_epochs) else args.epochs
            settings = ["in-domain"] + (
                ["transfer"] if args.transfer and loss == "rank" and len(domains) > 1 else []
            )
            for setting in [s for s in settings if s in parts]:
                pre_on = args.pretrain and kind != "linear" and setting in args.pretrain_settings.split(",")
                pres = ([] if args.pretrain_only else [0]) + ([args.pretrain_epochs] if pre_on else [])
                for pre in pres:
                    for d in domains:
                        for s in range(args.seeds):
                            tasks.append({"domain": d.name, "kind": kind, "loss": loss, "seed": s, "setting": setting,
                                          "epochs": epochs, "batch_size": args.batch_size, "hidden": args.hidden,
                                          "pretrain_epochs": pre})  # fmt: skip
    # Most informative first, so a run cut short still has in-domain rank results for every kind.
    tasks.sort(key=lambda t: (t["setting"] != "in-domain", t["loss"] != "rank", t["kind"] == "rnn"))
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump(data, f)
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_init, initargs=(f.name,)) as pool:
        futures = {pool.submit(run_task, t): t for t in tasks}
        for fut in as_completed(futures):
            emit(fut.result())
    Path(f.name).unlink()
    out.close()
    print_table(rows)


if __name__ == "__main__":
    main()
