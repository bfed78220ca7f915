"""Uniform random sampler: every factor drawn uniformly, no knowledge constraints (the search baseline)."""

from __future__ import annotations

import numpy as np

from search.samplers.base import Sampler
from search.samplers.partial import assemble, draw_partial
from simulator.spec import Strategy


class UniformSampler(Sampler):
    """Factor-wise uniform strategies: each PS shard's server and each collective shard's merge
    group are drawn uniformly (servers among all nodes, groups among 0..N-1), independently."""

    name = "random"

    def draw(self, rng: np.random.Generator) -> Strategy:
        partial = draw_partial(self.space, rng, self.prior)
        for var in partial.shards:
            for d in var:
                if d.ps:
                    d.server = int(rng.integers(len(self.space.servers)))
                else:
                    d.group = int(rng.integers(partial.n_groups))
        return assemble(self.space, partial)
