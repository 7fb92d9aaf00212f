"""Propagators (evolutionary operators): base operators, genetic operators, particle swarms, Nelder–Mead."""

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
from .nm import ParallelNelderMead
from .pso import (
    BasicPSO,
    CanonicalPSO,
    ConstrictionPSO,
    InitUniformPSO,
    StatelessPSO,
    VelocityClampingPSO,
)

__all__ = [
    "BasicPSO",
    "CanonicalPSO",
    "Compose",
    "Conditional",
    "ConstrictionPSO",
    "CrossoverMultiple",
    "CrossoverSigmoid",
    "CrossoverUniform",
    "InitUniform",
    "InitUniformPSO",
    "IntervalMutationNormal",
    "ParallelNelderMead",
    "PointMutation",
    "Propagator",
    "RandomPointMutation",
    "SelectMax",
    "SelectMin",
    "SelectUniform",
    "StatelessPSO",
    "Stochastic",
    "VelocityClampingPSO",
]
