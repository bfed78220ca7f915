"""Searchers that only sample: uniform random (no constraints), AutoSync(-s) (constraints, no simulator)."""

from __future__ import annotations

from search.feasibility import MemoryModel
from search.samplers import ConstrainedSampler, Constraints, Sampler, UniformSampler
from search.searchers.base import Searcher
from search.space import Space, SpaceConfig
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class SamplerSearcher(Searcher):
    """Asks fresh draws of a sampler; results are recorded but do not steer it."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, sampler: Sampler, seed: int = 0) -> None:
        super().__init__(model, cluster, seed)
        self.sampler = sampler

    def ask(self, n: int) -> list[Strategy]:
        return self.sampler.sample(n)


class RandomSearcher(SamplerSearcher):
    """Uniform random over the space: placement and groups drawn uniformly (no c_lb, no c_am)."""

    name = "random"

    def __init__(
        self, model: ModelSpec, cluster: ClusterSpec, seed: int = 0, space: SpaceConfig | None = None
    ) -> None:
        sampler = UniformSampler(Space(model, cluster, space), seed, MemoryModel(model, cluster))
        super().__init__(model, cluster, sampler, seed)


class ConstrainedSearcher(SamplerSearcher):
    """AutoSync(-s): constrained sampling (c_lb, c_am) without a simulator."""

    name = "autosync-s"

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        seed: int = 0,
        space: SpaceConfig | None = None,
        constraints: Constraints | None = None,
    ) -> None:
        sampler = ConstrainedSampler(
            Space(model, cluster, space), seed, MemoryModel(model, cluster), constraints
        )
        super().__init__(model, cluster, sampler, seed)
