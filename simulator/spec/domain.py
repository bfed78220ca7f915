"""A domain is one (model, cluster) pair: runtimes, simulators and searches are grouped by it.

Its name is written by `domain_name` and read back by `domain_splits` / `split_domain`, here and
nowhere else: a model or cluster name may itself contain the separator, so reading a name back is
ambiguous in general and every reader must treat that the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

#: Between the model's and the cluster's name in a domain name.
SEPARATOR = "__"


def domain_name(model: str, cluster: str) -> str:
    """The domain's name, ``'<model>__<cluster>'``, as used by datasets/runtimes/ folders,
    simulator versions and the service (e.g. ``'VGG16__A2'``)."""
    return f"{model}{SEPARATOR}{cluster}"


def domain_splits(domain: str) -> Iterator[tuple[str, str]]:
    """Every (model, cluster) reading of ``domain``, leftmost separator first, both parts non-empty.

    ``'a__b__c'`` reads as ``('a', 'b__c')``, then ``('a__b', 'c')``; a caller that can check which
    names exist (the service resolving specs) takes the first reading that does.
    """
    at = domain.find(SEPARATOR)
    while at >= 0:
        model, cluster = domain[:at], domain[at + len(SEPARATOR) :]
        if model and cluster:
            yield model, cluster
        at = domain.find(SEPARATOR, at + 1)


def split_domain(domain: str) -> tuple[str, str]:
    """(model, cluster) of ``domain``: its first reading (`domain_splits`), right for every zoo name.

    ValueError naming the domain when it has no reading (no separator, or an empty part).
    """
    for reading in domain_splits(domain):
        return reading
    raise ValueError(f"domain {domain!r} is not '<model>{SEPARATOR}<cluster>'")
