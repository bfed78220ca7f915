"""Gradient buckets of a TaskGraph's data-parallel all-reduce: the one description the hybrid
runtime issues and the hybrid cost model times (issue 19).

PyTorch DDP and Horovod do not all-reduce a replica's gradients after the whole backward: they
group parameters into buckets in reverse layer order (the order backward produces them) and start
a bucket's all-reduce as soon as its last gradient is written, so the all-reduces of the last
layers run while the earlier layers' backward still computes. ``grad_buckets`` is that grouping
for layers [first, last) of a ModelSpec:

- walk the layers from ``last - 1`` down to ``first`` and add each layer's gradient bytes
  (``Variable.grad_bytes``: density-scaled for sparse variables, Eq. 2's m_i, what the cost
  model's sync has always used) to the open bucket; close the bucket when it holds at least
  ``cap_bytes`` (DDP's rule: a bucket is closed once its size reaches ``bucket_cap_mb``);
- a bucket covers layers [lo, hi): ``hi`` is where the previous bucket stopped, ``lo`` the lowest
  layer whose gradient it holds, so it is *ready* when backward has finished layer ``lo``;
- layers without variables below the lowest variable layer belong to no bucket (their backward
  runs after the last bucket is ready; nothing waits on them); a TaskGraph without variables has
  no bucket. Every variable of [first, last) is in exactly one bucket.

Decisions:
- ``BUCKET_BYTES`` = 25 MiB, DDP's default ``bucket_cap_mb`` (Horovod's fusion buffer is 64 MiB;
  DDP is what a PyTorch user gets). DDP's first bucket is 1 MiB (``_DEFAULT_FIRST_BUCKET_BYTES``)
  so the first all-reduce starts early; not copied: one cap keeps the rule one line, and the
  first 25 MiB of BERT-large's gradients (the pooler/classifier and the last encoder layer) is
  ready after a few ms of backward anyway.
- Bucket boundaries are at layer granularity (a layer's variables never straddle two buckets),
  so the runtime can replay a bucket's backward as the sum of its layers' backward times.
- Sizes are real-cluster bytes; the testbed divides them by its ``scale`` like every message.

Shapes: L layers; buckets in backward order (the first bucket holds the last layers).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.spec import ModelSpec

#: DDP's default bucket cap (``bucket_cap_mb=25``), in bytes.
BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class Bucket:
    """Gradients of layers [lo, hi) (the ones with variables), all-reduced as one call."""

    lo: int
    hi: int
    grad_bytes: float


def layer_grad_bytes(model: ModelSpec, layer: int) -> float:
    """Gradient bytes of one layer (every variable's ``grad_bytes``)."""
    return float(sum(v.grad_bytes for v in model.layers[layer].variables))


def grad_buckets(
    model: ModelSpec, first: int, last: int, cap_bytes: float = BUCKET_BYTES
) -> tuple[Bucket, ...]:
    """The buckets of layers [first, last) in backward order (see the module docstring)."""
    if not 0 <= first <= last <= len(model.layers):
        raise ValueError(f"layers: need 0 <= first <= last <= {len(model.layers)}, got [{first}, {last})")
    if not cap_bytes > 0:
        raise ValueError(f"bucket_bytes: must be > 0, got {cap_bytes}")
    out: list[Bucket] = []
    hi = last
    size = 0.0
    lowest = None  # lowest layer with a gradient in the open bucket
    for layer in range(last - 1, first - 1, -1):
        if not model.layers[layer].variables:
            continue
        g = layer_grad_bytes(model, layer)
        size += g
        lowest = layer
        if size >= cap_bytes:
            out.append(Bucket(layer, hi, size))
            hi, size, lowest = layer, 0.0, None
    if lowest is not None:
        out.append(Bucket(lowest, hi, size))
    return tuple(out)
