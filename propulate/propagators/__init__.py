"""Propagators (evolutionary operators): base operators and genetic operators."""

from .base import (
    Compose,
    Conditional,
    InitUniform,
    Propagator,
    SelectMax,
    SelectMin,
    SelectUniform,
    Stochastic,
)
from .ga import (
    CrossoverMultiple,
    CrossoverSigmoid,
    CrossoverUniform,
    IntervalMutationNormal,
    PointMutation,
    RandomPointMutation,
)

__all__ = [
    "Compose",
    "Conditional",
    "CrossoverMultiple",
    "CrossoverSigmoid",
    "CrossoverUniform",
    "InitUniform",
    "IntervalMutationNormal",
    "PointMutation",
    "Propagator",
    "RandomPointMutation",
    "SelectMax",
    "SelectMin",
    "SelectUniform",
    "Stochastic",
]
