"""Predicted vs measured forward+backward time per zoo model on the local device (issue 15).

    python benchmarks/compute_model.py [--batch 2] [--repeats 3] [--budget-s 20] [--models A,B]

1. Calibrates a DeviceType for this machine with micro-benchmarks (``calibrate_device``):
   the best matmul throughput over 256/512/1024 squares (the FP32 peak), a Linear(1024, 1024)
   forward + backward on 512 rows (its share of the peak is the gemm efficiency), 3x3 convolution
   throughput (the conv efficiency), batched 128x64x128 products (the
   attention efficiency), memory bandwidth from copying a 64 MB tensor into another (read +
   write), batch norm + ReLU's attained share of it (the norm efficiency) and the per-kernel
   overhead from a chain of one-element ops run forward and backward (dispatch + autograd: the
   "launch" cost on a CPU).
2. For every zoo model whose predicted step fits ``--budget-s``: predicts fwd+bwd with
   ``simulator.analytical.compute.layer_times`` (the cost model's one compute function), then
   measures it: on the model's real implementation where it imports here (reference_models,
   transformers), else on its layer replicas (``simulator.profile.replica``; torchvision does not
   import beside torch 2.13). The ``measured on`` column says which.
3. Prints per model predicted / measured / log ratio, then median and max |log ratio| and the
   Spearman rank correlation (scipy).

Torch runs on one thread (``torch.set_num_threads(1)``) for stable timings on a shared machine,
every time (micro-benchmarks and models) is the calling thread's CPU time
(``simulator.profile.measure.clock_for``: time the scheduler gives other processes is not
counted) and the fastest of ``--repeats`` runs after a warm-up: on a loaded host the
least-disturbed run is the reproducible one.
On CUDA (``--device cuda``) the device spec comes from the same micro-benchmarks on the GPU.
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch

from simulator import zoo
from simulator.analytical import CostParams, compute
from simulator.analytical.compute import OpEfficiency
from simulator.profile import reference_module, time_module, time_replicas
from simulator.profile.measure import clock_for
from simulator.spec import DeviceType


def _best_time(fn, repeats: int, device: torch.device) -> float:  # type: ignore[no-untyped-def]
    """The fastest of ``repeats`` runs after a warm-up: the least-disturbed one on a shared host."""
    clock = clock_for(device)
    fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(clock() - t0)
    return min(out)


def calibrate_device(device: torch.device, repeats: int = 7) -> tuple[DeviceType, OpEfficiency]:
    """A DeviceType and op-class efficiencies measured on ``device`` (see the module docstring)."""
    peak = 0.0
    for n in (256, 512, 1024):
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
        peak = max(peak, 2 * n**3 / _best_time(lambda: a @ b, repeats, device))  # noqa: B023
    x = torch.randn(8, 64, 56, 56, device=device)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).to(device)
    with torch.no_grad():
        t_conv = _best_time(lambda: conv(x), repeats, device)
    conv_rate = 2 * 8 * 64 * 64 * 9 * 56 * 56 / t_conv
    big = torch.randn(16 * 1024 * 1024, device=device)  # 64 MB, beyond any cache
    dst = torch.empty_like(big)
    bw = 2 * big.numel() * 4 / _best_time(lambda: dst.copy_(big), repeats, device)
    # A training GEMM: Linear(1024, 1024) on 512 rows, forward and both gradients (transposed
    # operands, as backward runs them): the gemm class's share of the square-matmul peak.
    lin = torch.nn.Linear(1024, 1024, bias=False).to(device)
    xin = torch.randn(512, 1024, device=device, requires_grad=True)

    def linear_step() -> None:
        lin(xin).backward(torch.ones(512, 1024, device=device))

    gemm_rate = 3 * 2 * 512 * 1024 * 1024 / _best_time(linear_step, repeats, device)
    # Attention core shapes (8 heads of 128 tokens x 64): batched QK^T, the attention op class.
    q = torch.randn(8, 128, 64, device=device)
    kt = torch.randn(8, 64, 128, device=device)
    att_rate = 2 * 8 * 128 * 64 * 128 / _best_time(lambda: q @ kt, repeats, device)
    # Batch norm + ReLU (training mode) on 8x64x56x56, counted as the roofline counts it: five
    # passes over the activation (statistics, normalise read + write, ReLU read + write).
    norm = torch.nn.BatchNorm2d(64).to(device).train()
    with torch.no_grad():
        t_norm = _best_time(lambda: torch.relu(norm(x)), repeats, device)
    norm_bw = 5 * x.numel() * 4 / t_norm
    tiny = torch.ones(1, device=device, requires_grad=True)

    def chain() -> None:  # 200 recorded ops forward, then their 200 backward nodes
        y = tiny
        for _ in range(200):
            y = y * 1.0
        y.backward()

    t_op = _best_time(chain, repeats, device) / 400
    dt = DeviceType(
        name=f"{device.type}-calibrated",
        fp32_tflops=peak / 1e12,
        fp16_tflops=peak / 1e12,
        memory_gb=64,
        memory_bw_gbs=bw / 1e9,
        launch_overhead_us=t_op * 1e6,
        source=f"micro-benchmarks on {device.type} with {torch.get_num_threads()} torch threads",
    )
    eff = OpEfficiency(
        gemm=min(1.0, gemm_rate / peak),
        conv=min(1.0, conv_rate / peak),
        attention=min(1.0, att_rate / peak),
        vector=1.0,
        memory=1.0,
        norm=min(1.0, norm_bw / bw),
    )
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
        f"device {dt.name}: matmul {dt.fp32_tflops * 1e3:.1f} GFLOP/s, efficiency gemm {eff.gemm:.2f} conv {eff.conv:.2f} "
        f"attention {eff.attention:.2f}, copy {dt.memory_bw_gbs:.1f} GB/s, norm {eff.norm:.2f} of it, "
        f"per-op {dt.launch_overhead_us:.1f} us "
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
            t = time_module(real[0], real[1], device, args.repeats, min)
            measured, on = t.fwd_s + t.bwd_s, "real module"
            del real
        else:
            ts = time_replicas(model, args.batch, device, "float32", args.repeats, min)
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


__all__ = ["calibrate_device", "main", "spearman"]
