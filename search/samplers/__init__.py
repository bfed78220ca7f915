"""Strategy samplers: one interface, one implementation per file."""

from search.samplers.base import InfeasibleSpaceError, Rejection, Sampler
from search.samplers.constrained import ConstrainedSampler, Constraints
from search.samplers.uniform import UniformSampler

__all__ = [
    "ConstrainedSampler",
    "Constraints",
    "InfeasibleSpaceError",
    "Rejection",
    "Sampler",
    "UniformSampler",
]
