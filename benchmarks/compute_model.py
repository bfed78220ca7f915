"""Predicted vs measured forward+backward time per zoo model on the local device (issue 15).

    python benchmarks/compute_model.py [--batch 2] [--repeats 3] [--budget-s 20] [--models A,B]

1. Calibrates a DeviceType for this machine with micro-benchmarks (``calibrate_device``):
   matmul throughput (the FP32 peak; so gemm efficiency is 1 by construction), 3x3 convolution
   throughput (its ratio to matmul is the conv efficiency), memory bandwidth from copying a
   64 MB tensor into another (read + write) and per-op overhead from a one-element op with
   autograd (the "launch" cost on a CPU).
2. For every zoo model whose predicted step fits ``--budget-s``: predicts fwd+bwd with
   ``simulator.analytical.compute.layer_times`` (the cost model's one compute function), then
   measures it: on the model's real implementation where it imports here (reference_models,
   transformers), else on its layer replicas (``simulator.profile.replica``; torchvision does not
   import beside torch 2.13). The ``measured on`` column says which.
3. Prints per model predicted / measured / log ratio, then median and max |log ratio| and the
   Spearman rank correlation (scipy).

Torch runs on one thread (``torch.set_num_threads(1)``) for stable timings on a shared machine.
On CUDA (``--device cuda``) the device spec comes from the same micro-benchmarks on the GPU.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace

import torch

from simulator import zoo
from simulator.analytical import CostParams, compute
from simulator.analytical.compute import OpEfficiency
from simulator.profile import reference_module, time_module, time_replicas
from simulator.spec import DeviceType


def _median_time(fn, repeats: int, device: torch.device) -> float:  # type: ignore[no-untyped-def]
    fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def calibrate_device(device: torch.device, repeats: int = 5) -> tuple[DeviceType, OpEfficiency]:
    """A DeviceType and op-class efficiencies measured on ``device`` (see the module docstring)."""
    n = 1024
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    t_mm = _median_time(lambda: a @ b, repeats, device)
    peak = 2 * n**3 / t_mm
    x = torch.randn(8, 64, 56, 56, device=device)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).to(device)
    with torch.no_grad():
        t_conv = _median_time(lambda: conv(x), repeats, device)
    conv_rate = 2 * 8 * 64 * 64 * 9 * 56 * 56 / t_conv
    big = torch.randn(16 * 1024 * 1024, device=device)  # 64 MB, beyond any cache
    dst = torch.empty_like(big)
    t_copy = _median_time(lambda: dst.copy_(big), repeats, device)
    bw = 2 * big.numel() * 4 / t_copy
    tiny = torch.ones(1, device=device, requires_grad=True)
    t_op = _median_time(lambda: [tiny * 1.0 for _ in range(200)], repeats, device) / 200
    dt = DeviceType(
        name=f"{device.type}-calibrated",
        fp32_tflops=peak / 1e12,
        fp16_tflops=peak / 1e12,
        memory_gb=64,
        memory_bw_gbs=bw / 1e9,
        launch_overhead_us=t_op * 1e6,
        source=f"micro-benchmarks on {device.type} with {torch.get_num_threads()} torch threads",
    )
    eff = OpEfficiency(gemm=1.0, conv=min(1.0, conv_rate / peak), attention=1.0, vector=1.0, memory=1.0)
    return dt, eff


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
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    dt, eff = calibrate_device(device)
    print(
        f"device {dt.name}: matmul {dt.fp32_tflops * 1e3:.1f} GFLOP/s, conv efficiency {eff.conv:.2f}, "
        f"copy {dt.memory_bw_gbs:.1f} GB/s, per-op {dt.launch_overhead_us:.1f} us "
        f"({torch.get_num_threads()} torch threads)"
    )
    params = CostParams(op_efficiency=eff, compute_dtype="float32")
    names = [n for n in args.models.split(",") if n] or zoo.model_names()
    rows: list[tuple[str, float, float, str]] = []
    print(
        f"{'model':14s} {'batch':>5s} {'predicted s':>12s} {'measured s':>11s} {'log ratio':>9s}  measured on"
    )
    for name in names:
        model = zoo.model(name)
        pred = compute.layer_times(model, dt, args.batch, params).step
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
        real = reference_module(name, args.batch, device, model)
        if real is not None:
            t = time_module(real[0], real[1], device, args.repeats)
            measured, on = t.fwd_s + t.bwd_s, "real module"
            del real
        else:
            ts = time_replicas(model, args.batch, device, "float32", args.repeats)
            measured, on = sum(x.fwd_s + x.bwd_s for x in ts), "layer replicas"
        rows.append((name, pred, measured, on))
        print(
            f"{name:14s} {args.batch:5d} {pred:12.4f} {measured:11.4f} {math.log(pred / measured):+9.3f}  {on}",
            flush=True,
        )
    if len(rows) < 2:
        print("fewer than two models measured")
        return 1
    logs = [abs(math.log(p / m)) for _, p, m, _ in rows]
    print(
        f"\n{len(rows)} models: median |log ratio| {statistics.median(logs):.3f}, "
        f"max {max(logs):.3f}, Spearman {spearman([r[1] for r in rows], [r[2] for r in rows]):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["calibrate_device", "main", "replace", "spearman"]
