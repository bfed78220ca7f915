"""Constrained sampler: a partial strategy completed by c_lb (Algorithm 1) and c_am (Algorithm 2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from search.constraints import adjacent_merge, load_balance
from search.feasibility import MemoryModel
from search.samplers.base import Sampler
from search.samplers.partial import Prior, assemble, draw_partial
from search.space import Space
from simulator.spec import Strategy


@dataclass(frozen=True)
class Constraints:
    """Which knowledge constraints are on (each can be switched off for the ablation)."""

    # c_lb: PS shards placed by Algorithm 1; off: each server drawn uniformly.
    load_balance: bool = True
    # c_am: collective shards grouped by Algorithm 2; off: each group drawn uniformly in 0..N-1.
    adjacent_merge: bool = True
    # Algorithm 1's softmax temperature in units of the mean PS shard bytes (0 = literal argmax).
    temperature: float = 1.0


class ConstrainedSampler(Sampler):
    """AutoSync's sampler (§6): partial strategy, then c_lb and c_am fill placement and groups."""

    name = "constrained"

    def __init__(
        self,
        space: Space,
        seed: int = 0,
        memory: MemoryModel | None = None,
        constraints: Constraints | None = None,
        max_rejections_per_strategy: int = 50,
        prior: Prior = "hierarchical",
    ) -> None:
        super().__init__(space, seed, memory, max_rejections_per_strategy, prior)
        self.constraints = constraints or Constraints()

    def draw(self, rng: np.random.Generator) -> Strategy:
        c = self.constraints
        partial = draw_partial(self.space, rng, self.prior)
        ps = partial.ps_shards()
        if c.load_balance:
            placed = load_balance(
                np.array([d.message_bytes for d in ps]),
                np.array(self.space.server_bandwidth),
                rng,
                c.temperature,
            )
            for d, j in zip(ps, placed, strict=True):
                d.server = int(j)
        else:
            for d in ps:
                d.server = int(rng.integers(len(self.space.servers)))
        cc = partial.collective_shards_backprop()
        if c.adjacent_merge:
            groups = adjacent_merge(np.array([d.message_bytes for d in cc]), partial.n_groups)
            for d, g in zip(cc, groups, strict=True):
                d.group = int(g)
        else:
            for d in cc:
                d.group = int(rng.integers(partial.n_groups))
        return assemble(self.space, partial)
