"""A domain is one (model, cluster) pair: runtimes, simulators and searches are grouped by it."""

from __future__ import annotations


def domain_name(model: str, cluster: str) -> str:
    """The domain's name, ``'<model>__<cluster>'``, as used by datasets/runtimes/ folders,
    simulator versions and the service (e.g. ``'VGG16__A2'``)."""
    return f"{model}__{cluster}"
