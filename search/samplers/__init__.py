"""Strategy samplers: one interface, one implementation per file; ``ArraySampler`` draws many at
once as the analytical scorer's arrays (the round's sampler, ``search.round``)."""

from search.samplers.arrays import ArraySampler, ChoiceArrays
from search.samplers.base import InfeasibleSpaceError, Rejection, Sampler
from search.samplers.constrained import ConstrainedSampler, Constraints
from search.samplers.uniform import UniformSampler

__all__ = [
    "ArraySampler",
    "ChoiceArrays",
    "ConstrainedSampler",
    "Constraints",
    "InfeasibleSpaceError",
    "Rejection",
    "Sampler",
    "UniformSampler",
]
