"""AutoSync's knowledge constraints: load balance c_lb (Algorithm 1) and adjacent merge c_am (Algorithm 2).

Both act on the shards of the transformed graph V'_{G,theta} (AutoSync supplementary §6) and fill
the two fields a partial strategy leaves open: the PS server of each PS shard, and the merge group
of each collective shard. They are pure functions of byte sizes, so they are tested on their own.
"""

from __future__ import annotations

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
    share = np.asarray(bandwidth, dtype=np.float64) / float(np.sum(bandwidth))
    unit = float(np.mean(shard_bytes)) * temperature
    loads = np.zeros(len(share))
    for i in np.argsort(-np.asarray(shard_bytes, dtype=np.float64), kind="stable"):
        lag = loads.sum() * share - loads
        if unit > 0:
            logits = lag / unit
            p = np.exp(logits - logits.max())
            j = int(rng.choice(len(share), p=p / p.sum()))
        else:
            best = np.flatnonzero(lag >= lag.max() - 1e-9 * max(1.0, abs(lag.max())))
            j = int(rng.choice(best))
        out[i] = j
        loads[j] += shard_bytes[i]
    return out


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
