"""Predicted vs measured forward+backward time per zoo model on the local device (issue 15).

    python benchmarks/compute_model.py [--batch 2] [--repeats 3] [--budget-s 20] [--models A,B]
                                       [--start-calibrations 3] [--fit-on A,B]

1. Calibrates a DeviceType and per-pass op-class shares for this machine
   (``simulator.profile.calibrate``: matmul and convolution throughput, memory-copy and first-touch
   bandwidth, per-op overhead, micro-layers per roofline class at generic shapes; no zoo model
   is used), each time in a fresh process: ``--start-calibrations`` times before any model (their
   median is the *start* calibration), then once after every model measured (*interleaved*: the
   median over all of them, taken over the same stretch of host load the models were measured in).
   Each calibration prints one line (its rates), so their spread over the run is visible.
2. For every zoo model whose predicted step fits ``--budget-s``: predicts fwd+bwd with
   ``simulator.analytical.compute.layer_times`` (the cost model's one compute function), then
   measures it: on the model's real implementation where it imports here (reference_models,
   transformers, torchvision), else on its layer replicas (``simulator.profile.replica``). The
   ``measured on`` column says which. torchvision does not import beside the project's torch
   2.13, so for real CNNs run it from a venv with torch 2.14.1, torchvision 0.29.1 and
   transformers (DESIGN.md), with ``PYTHONPATH`` at the repository.
3. Prints per model predicted (start and interleaved calibration) / measured / log ratio, then
   median and max |log ratio| and the Spearman rank correlation (scipy) with each micro-benchmark
   calibration alone (no model fitted), then with ``ModelScales.matrix`` (one factor on the
   gemm/conv/attention shares: the share of the micro-layers' rates whole models reach) fitted
   leave-one-out on the interleaved calibration, so every model's figure comes from a fit that did
   not see it; with ``--fit-on A,B,...`` also fitted once on those calibration models and reported
   on the held-out rest.

Torch runs on one thread (``torch.set_num_threads(1)``) for stable timings on a shared machine,
every time (micro-benchmarks and models) is the calling thread's CPU time
(``simulator.profile.measure.clock_for``: time the scheduler gives other processes is not
counted) and the fastest of ``--repeats`` runs after a warm-up, for the micro-benchmarks and the
models alike: on a loaded host the least-disturbed run is the reproducible one. Each model and
each calibration runs in a fresh process (``_measure``, ``_calibrate``), so what one leaves in
the allocator cannot change the next one's figure. On CUDA (``--device cuda``) the device spec
comes from the same micro-benchmarks on the GPU.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor

import torch

from simulator import zoo
from simulator.analytical import CostParams, compute
from simulator.profile import reference_module, time_module, time_replicas
from simulator.profile.calibrate import (
    Calibration,
    ModelScales,
    calibration_from,
    calibration_times,
    fit_scales,
    merge_times,
)
from simulator.spec import ModelSpec


def spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=20.0, help="skip models predicted slower than this")
    ap.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-param-gb", type=float, default=2.0, help="skip models with more parameters")
    ap.add_argument(
        "--fit-on",
        default="",
        help="comma-separated calibration models: fit ModelScales once on them and report the others",
    )
    ap.add_argument(
        "--start-calibrations",
        type=int,
        default=3,
        help="calibrations in fresh processes before any model (their median is the start calibration)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    def calibrate(label: str) -> dict[str, float]:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            times = pool.submit(_calibrate, args.device, args.threads, args.repeats).result()
        describe(label, calibration_from(times, args.device, args.threads))
        return times

    print(
        f"calibrations (fresh processes, {args.threads} torch threads, fastest of {args.repeats} interleaved rounds):"
    )
    start = [calibrate(f"start {i + 1}") for i in range(args.start_calibrations)]
    cal0 = calibration_from(merge_times(start), args.device, args.threads)
    params0 = CostParams(op_efficiency=cal0.efficiency, compute_dtype="float32")
    names = [n for n in args.models.split(",") if n] or zoo.model_names()
    rows: list[tuple[str, float, str]] = []
    runs = list(start)
    print(
        f"{'model':14s} {'batch':>5s} {'start pred s':>12s} {'measured s':>11s} {'log ratio':>9s}  measured on"
    )
    for name in names:
        model = zoo.model(name)
        pred = compute.layer_times(model, cal0.device, args.batch, params0).step
        if model.param_bytes > args.max_param_gb * 1e9:
            print(
                f"{name:14s} {args.batch:5d} {pred:12.4f} {'-':>11s} {'-':>9s}  skipped: parameters > {args.max_param_gb} GB"
            )
            continue
        if pred > args.budget_s:
            print(
                f"{name:14s} {args.batch:5d} {pred:12.4f} {'-':>11s} {'-':>9s}  skipped: predicted > {args.budget_s} s"
            )
            continue
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            measured, on = pool.submit(
                _measure, name, args.batch, args.device, args.threads, args.repeats
            ).result()
        rows.append((name, measured, on))
        print(
            f"{name:14s} {args.batch:5d} {pred:12.4f} {measured:11.4f} {math.log(pred / measured):+9.3f}  {on}",
            flush=True,
        )
        runs.append(calibrate(f"after {name}"))
    cal = calibration_from(merge_times(runs), args.device, args.threads)
    for title, c in (
        (f"start calibration (median of {len(start)})", cal0),
        (
            f"interleaved calibration (median of {len(runs)}: {len(start)} at start, one after each model)",
            cal,
        ),
    ):
        print(f"\n{title}:")
        describe("median", c)
        print(f"{'micro-layer':28s} {'fwd ms':>8s} {'bwd ms':>8s} {'share fwd':>9s} {'share bwd':>9s}")
        for fit in c.fits:
            print(
                f"{fit.key:28s} {fit.measured[0] * 1e3:8.3f} {fit.measured[1] * 1e3:8.3f} "
                f"{fit.share[0]:9.2f} {fit.share[1]:9.2f}"
            )
    dt, eff = cal.device, cal.efficiency
    params = CostParams(op_efficiency=eff, compute_dtype="float32")
    print(
        f"\n{'model':14s} {'start pred s':>12s} {'interl. pred s':>14s} {'measured s':>11s} {'log start':>9s} {'log interl.':>11s}"
    )
    specs_ = {name: zoo.model(name) for name, _, _ in rows}
    pairs0: list[tuple[float, float]] = []
    pairs: list[tuple[float, float]] = []
    for name, m, _ in rows:
        p0 = compute.layer_times(zoo.model(name), cal0.device, args.batch, params0).step
        p = compute.layer_times(zoo.model(name), dt, args.batch, params).step
        pairs0.append((p0, m))
        pairs.append((p, m))
        print(f"{name:14s} {p0:12.4f} {p:14.4f} {m:11.4f} {math.log(p0 / m):+9.3f} {math.log(p / m):+11.3f}")
    if len(rows) < 2:
        print("fewer than two models measured")
        return 1
    summary("micro-benchmarks only, calibrated at start (no model fitted)", pairs0)
    summary("micro-benchmarks only, calibrated interleaved with the models (no model fitted)", pairs)
    # The spread a single calibration (one moment's host load) gives: each calibration alone.
    singles = []
    for times in runs:
        one = calibration_from(times, args.device, args.threads)
        p1 = CostParams(op_efficiency=one.efficiency, compute_dtype="float32")
        logs = [
            abs(math.log(compute.layer_times(specs_[name], one.device, args.batch, p1).step / m))
            for name, m, _ in rows
        ]
        singles.append(statistics.median(logs))
    print(
        f"each of the {len(runs)} calibrations alone (no model fitted): median |log ratio| "
        f"{min(singles):.3f} to {max(singles):.3f} ({', '.join(f'{x:.3f}' for x in singles)})"
    )
    # Leave-one-out: each model's prediction comes from ModelScales fitted on the other models.
    specs = {name: zoo.model(name) for name, *_ in rows}
    samples = [(specs[name], args.batch, m) for name, m, _ in rows]
    print(
        f"\n{'model':14s} {'matrix':>6s} {'launch':>6s} {'held-out pred s':>15s} {'measured s':>11s} {'log ratio':>9s}"
    )
    held: list[tuple[float, float]] = []
    for i, (name, m, _) in enumerate(rows):
        scales = fit_scales(cal, samples[:i] + samples[i + 1 :])
        p = _predict(specs[name], args.batch, cal, scales)
        held.append((p, m))
        print(
            f"{name:14s} {scales.matrix:6.3f} {scales.launch:6.3f} {p:15.4f} {m:11.4f} {math.log(p / m):+9.3f}"
        )
    summary("micro-benchmarks + ModelScales fitted on the other models (leave-one-out)", held)
    whole = fit_scales(cal, samples)
    print(f"ModelScales fitted on all {len(rows)}: matrix {whole.matrix:.3f}, launch {whole.launch:.3f}")
    fit_on = [n for n in args.fit_on.split(",") if n]
    if fit_on:
        chosen = [s for s in samples if s[0].name in fit_on]
        scales = fit_scales(cal, chosen)
        rest = [(name, m) for name, m, _ in rows if name not in fit_on]
        print(
            f"\nModelScales fitted on {', '.join(s[0].name for s in chosen)}: matrix {scales.matrix:.3f}; "
            f"held out: {', '.join(name for name, _ in rest)}"
        )
        pairs = [(_predict(specs[name], args.batch, cal, scales), m) for name, m in rest]
        for (name, m), (p, _) in zip(rest, pairs, strict=True):
            print(f"{name:14s} {p:15.4f} {m:11.4f} {math.log(p / m):+9.3f}")
        summary("micro-benchmarks + ModelScales fitted on the calibration set, held-out models", pairs)
    return 0


def _calibrate(device_name: str, threads: int, repeats: int) -> dict[str, float]:
    """``calibration_times`` in a fresh process (as every model is measured)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return calibration_times(torch.device(device_name), repeats)


def describe(label: str, cal: Calibration) -> None:
    """One line per calibration: the device figures and the matrix classes' effective rates."""
    dt, eff = cal.device, cal.efficiency
    touch = f"{dt.first_touch_gbs:.1f}" if dt.first_touch_gbs is not None else "-"
    bwd = eff.backward or eff
    rate = {k: dt.fp32_tflops * 1e3 * getattr(eff, k) for k in ("gemm", "conv")}
    rate_b = {k: dt.fp32_tflops * 1e3 * getattr(bwd, k) for k in ("gemm", "conv")}
    print(
        f"  {label:22s} peak {dt.fp32_tflops * 1e3:6.1f} GFLOP/s, gemm {rate['gemm']:5.1f}/{rate_b['gemm']:5.1f}, "
        f"conv {rate['conv']:5.1f}/{rate_b['conv']:5.1f} (fwd/bwd), copy {dt.memory_bw_gbs:5.1f} GB/s, "
        f"norm {eff.norm:.2f}/{bwd.norm:.2f} of it, first touch {touch} GB/s, per-op {dt.launch_overhead_us:.2f} us",
        flush=True,
    )


def _measure(name: str, batch: int, device_name: str, threads: int, repeats: int) -> tuple[float, str]:
    """Fwd+bwd seconds of zoo model ``name`` and what ran (real module or layer replicas).

    Runs in a fresh process per model: the allocator's state left by the models measured before
    changed NCF-dense's backward 9x (0.19 s in a fresh process, whose every step zero-fills its
    dense embedding gradients into newly mapped pages, as a training process does; 0.02 s late in
    one long benchmark process, where the pages were already mapped).
    """
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device(device_name)
    model = zoo.model(name)
    real = reference_module(name, batch, device, model)
    if real is not None:
        t = time_module(real[0], real[1], device, repeats, min)
        return t.fwd_s + t.bwd_s, "real module"
    ts = time_replicas(model, batch, device, "float32", repeats, min)
    return sum(x.fwd_s + x.bwd_s for x in ts), "layer replicas"


def _predict(model: ModelSpec, batch: int, cal: Calibration, scales: ModelScales) -> float:
    dev, eff = scales.apply(cal)
    return compute.layer_times(model, dev, batch, CostParams(op_efficiency=eff, compute_dtype="float32")).step


def summary(title: str, pairs: list[tuple[float, float]]) -> None:
    logs = [abs(math.log(p / m)) for p, m in pairs]
    print(
        f"{title}: {len(pairs)} models, median |log ratio| {statistics.median(logs):.3f}, "
        f"max {max(logs):.3f}, Spearman {spearman([p for p, _ in pairs], [m for _, m in pairs]):.3f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["main", "spearman", "summary"]
