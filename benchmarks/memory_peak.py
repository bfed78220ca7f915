"""Benchmark: the 3D memory model's peak against the CPU allocator's peak of real training steps.

Builds GPT models in plain PyTorch (fp32, pre-norm blocks, dropout 0.1, causal softmax attention,
tied output embedding; the layer structure of ``simulator.threed.layers``), runs one warm-up
training step (Adam, ``zero_grad(set_to_none=True)``) and profiles the second with
``torch.profiler`` (``profile_memory``): every event's self allocations minus frees, in start
order, give the allocator's running total; its maximum plus the bytes alive before the step
(parameters and Adam's two moments, 12 B/param) is the measured peak. The prediction is
``simulator.threed.predict_memory`` on one GPU with the CPU run's dtypes: 4 + 4 + 8 B/param,
4-byte activations and dropout masks (ATen's CPU dropout multiplies by a noise tensor of the
input's dtype), logits + log-softmax at the end of the forward (8 B per logit), gradients freed,
no fragmentation margin, NCCL buffers or CUDA context (the allocator's own count, not a device's).

    python benchmarks/memory_peak.py
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from simulator.spec import DeviceType
from simulator.threed import GPTConfig, MemoryConfig, ThreeDPlan, predict_memory

CPU = DeviceType(name="cpu", fp32_tflops=1.0, fp16_tflops=1.0, memory_gb=64.0, memory_bw_gbs=20.0)
FP32_CPU = MemoryConfig(
    param_bytes=4,
    grad_bytes=4,
    optimizer_bytes=8,
    elem_bytes=4,
    mask_bytes=4,
    loss_bytes_per_logit=8,
    grads_persist=False,
    fragmentation=1.0,
    nccl_bytes_per_comm=0,
    context_bytes=0,
)
#: (hidden, heads, layers, seq, vocab, micro-batch): five GPTs, small enough for a shared CPU.
MODELS = [
    (256, 4, 2, 256, 8192, 4),
    (384, 6, 4, 256, 8192, 2),
    (512, 8, 2, 512, 4096, 2),
    (256, 4, 6, 128, 16384, 8),
    (768, 12, 2, 256, 8192, 2),
]


class Block(nn.Module):
    def __init__(self, h: int, a: int, p: float = 0.1) -> None:
        super().__init__()
        self.a, self.p = a, p
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.a
        q, k, v = (t.view(b, s, self.a, d).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(h, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        att = F.dropout(F.softmax(att, dim=-1), self.p, True)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, h)
        x = x + F.dropout(self.proj(y), self.p, True)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, True)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.padded_vocab(1), cfg.hidden)
        self.wpe = nn.Embedding(cfg.seq, cfg.hidden)
        self.blocks = nn.ModuleList([Block(cfg.hidden, cfg.heads) for _ in range(cfg.layers)])
        self.lnf = nn.LayerNorm(cfg.hidden)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])), 0.1, True)
        for block in self.blocks:
            x = block(x)
        return self.lnf(x) @ self.wte.weight.t()


def measured_peak(cfg: GPTConfig, batch: int) -> tuple[float, int]:
    """(allocator peak bytes of one training step, parameters)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.Adam(model.parameters(), foreach=False)
    v = cfg.padded_vocab(1)
    idx = torch.randint(0, v, (batch, cfg.seq))
    tgt = torch.randint(0, v, (batch, cfg.seq))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(idx).view(-1, v), tgt.view(-1)).backward()
        opt.step()

    step()  # Adam's moments exist from here on
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    running = peak = 0
    for ev in sorted(prof.events(), key=lambda e: e.time_range.start):
        running += ev.self_cpu_memory_usage
        peak = max(peak, running)
    n = sum(p.numel() for p in model.parameters())
    return float(12 * n + peak), n


def main() -> None:
    torch.set_num_threads(1)
    print(
        f"{'h':>4} {'a':>3} {'L':>2} {'s':>4} {'V':>6} {'b':>2} {'params':>9} {'measured MB':>11} {'predicted MB':>12} {'error':>7}"
    )
    errors = []
    for h, a, layers, seq, vocab, b in MODELS:
        cfg = GPTConfig(hidden=h, heads=a, layers=layers, seq=seq, vocab=vocab)
        t0 = time.perf_counter()
        meas, n = measured_peak(cfg, b)
        if n != cfg.params():
            raise SystemExit(f"parameter count {n} != GPTConfig.params() {cfg.params()}")
        pred = predict_memory(cfg, ThreeDPlan(micro_batch=b), CPU, FP32_CPU).peak
        errors.append(pred / meas - 1)
        print(
            f"{h:>4} {a:>3} {layers:>2} {seq:>4} {vocab:>6} {b:>2} {n:>9} {meas / 1e6:>11.1f} {pred / 1e6:>12.1f}"
            f" {100 * errors[-1]:>+6.1f}%  ({time.perf_counter() - t0:.1f} s)"
        )
    print(f"max |error| {100 * max(abs(e) for e in errors):.1f} %")


if __name__ == "__main__":
    main()
