"""Searchers behind one ask/tell interface: random, AutoSync(-s), AutoSync, TPE, CMA-ES."""

from search.searchers.autosync import AutoSyncConfig, AutoSyncSearcher
from search.searchers.base import Observation, Searcher
from search.searchers.cmaes import CMAESSearcher
from search.searchers.sampled import ConstrainedSearcher, RandomSearcher, SamplerSearcher
from search.searchers.tpe import TPESearcher

__all__ = [
    "AutoSyncConfig",
    "AutoSyncSearcher",
    "CMAESSearcher",
    "ConstrainedSearcher",
    "Observation",
    "RandomSearcher",
    "SamplerSearcher",
    "Searcher",
    "TPESearcher",
]
