"""Similarity between strategies for diverse selection: factor counts, or a simulator's hidden cosine."""

from search.similarity.base import Similarity
from search.similarity.factor import FACTORS, FactorSimilarity
from search.similarity.hidden import HiddenSimilarity

__all__ = ["FACTORS", "FactorSimilarity", "HiddenSimilarity", "Similarity"]
