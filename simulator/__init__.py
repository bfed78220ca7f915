"""Predicting: the vocabulary (model, cluster, strategy), analytical cost models and learned simulators."""
