"""Probabilistic models: Gaussian processes, Bayesian optimisation, normalizing flows, a neural topic
model and a Gaussian-mixture anomaly detector.
"""

from . import (  # noqa: F401  (registers models)
    bayesian_optimization,
    dagmm,
    gaussian_process,
    neural_spline_flow,
    prodlda,
    svgp,
)
