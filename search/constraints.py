"""AutoSync's knowledge constraints: load balance c_lb (Algorithm 1) and adjacent merge c_am (Algorithm 2).

Both act on the shards of the transformed graph V'_{G,theta} (AutoSync supplementary §6) and fill
the two fields a partial strategy leaves open: the PS server of each PS shard, and the merge group
of each collective shard. They are pure functions of byte sizes, so they are tested on their own.
"""

from __future__ import annotations

import math

import numpy as np


def load_balance(
    shard_bytes: np.ndarray, bandwidth: np.ndarray, rng: np.random.Generator, temperature: float = 1.0
) -> np.ndarray:
    """c_lb, Algorithm 1: place PS shards on servers so loads follow bandwidth.

    Shards are visited by byte size, descending (ties: input order). For each, with the current
    loads l_cur and l_all = sum(l_cur), server j is drawn from

        softmax(logits),  logits_j = (l_all * b_j / b_all - l_cur[j]) / (temperature * mean(bytes)),

    and gets the shard's bytes. ``l_all * b_j / b_all`` is server j's bandwidth-proportional share
    of the load placed so far, so the logit is how far j lags behind its share.

    Scale: Algorithm 1 (and AutoDist's ``christy_load_balancer``) feed raw byte counts to the
    softmax; with megabyte shards every logit gap is ~1e6, so after the first shard the draw is a
    hard argmax and the "randomized" balancer is deterministic. The paper calls the solution
    randomized and approximate, so we keep its logits but measure them in units of the mean shard
    size times ``temperature``: a server one average shard behind its share is e^(1/temperature)
    times likelier than one on target. ``temperature = 0`` reproduces the literal (argmax) rule,
    ties broken uniformly at random.

    Shapes: shard_bytes (S,), bandwidth (D,) -> server index per shard (S,), in input order.
    """
    n = len(shard_bytes)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    sizes = np.asarray(shard_bytes, dtype=np.float64)
    total_bw = float(np.sum(bandwidth))
    share = [float(b) / total_bw for b in bandwidth]
    unit = float(sizes.mean()) * temperature
    loads = [0.0] * len(share)
    draws = rng.random(n)  # one uniform per shard, inverse-CDF sampling (plain floats: D is small)
    for step, i in enumerate(np.argsort(-sizes, kind="stable").tolist()):
        total = sum(loads)
        lag = [total * s - load for s, load in zip(share, loads, strict=True)]
        top = max(lag)
        if unit > 0:
            weights = [math.exp((x - top) / unit) for x in lag]
        else:
            weights = [1.0 if x >= top - 1e-9 * max(1.0, abs(top)) else 0.0 for x in lag]
        j = _inverse_cdf(weights, float(draws[step]))
        out[i] = j
        loads[j] += float(sizes[i])
    return out


def _inverse_cdf(weights: list[float], u: float) -> int:
    """Index drawn with probability proportional to ``weights`` from a uniform ``u`` in [0, 1)."""
    target = u * sum(weights)
    acc = 0.0
    for j, w in enumerate(weights):
        acc += w
        if target < acc:
            return j
    return max(j for j, w in enumerate(weights) if w > 0)


def adjacent_merge(shard_bytes: np.ndarray, n_groups: int) -> np.ndarray:
    """c_am, Algorithm 2: split shards, given in back-propagation order, into adjacent byte-balanced groups.

    With l_avg = sum(bytes) / N, shards are walked in order and group g takes shards until its
    load reaches l_avg; then g advances. Every group but the last therefore holds at least l_avg
    and less than l_avg plus its last shard. Fewer than N groups come out when single shards hold
    more than l_avg (the ids stay 0..N'-1, contiguous); a float round-off that would open group N
    is kept in group N-1.

    Shapes: shard_bytes (S,) in back-propagation order -> group id per shard (S,), non-decreasing.
    """
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, got {n_groups}")
    out = np.empty(len(shard_bytes), dtype=np.int64)
    avg = float(np.sum(shard_bytes)) / n_groups
    g, load = 0, 0.0
    for i, b in enumerate(shard_bytes):
        if load >= avg and g < n_groups - 1:
            g, load = g + 1, 0.0
        out[i] = g
        load += float(b)
    return out
