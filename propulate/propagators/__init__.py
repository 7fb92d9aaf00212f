"""Propagators (evolutionary operators): base and genetic operators, particle swarms, CMA-ES, Nelder–Mead."""

from .base import (
    Compose,
    Conditional,
    Gaussian,
    InitUniform,
    Propagator,
    SelectMax,
    SelectMin,
    SelectUniform,
    Stochastic,
)
from .cmaes import ActiveCMA, BasicCMA, CMAAdapter, CMAParameter, CMAPropagator
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
    "ActiveCMA",
    "BasicCMA",
    "BasicPSO",
    "CMAAdapter",
    "CMAParameter",
    "CMAPropagator",
    "CanonicalPSO",
    "Compose",
    "Conditional",
    "ConstrictionPSO",
    "CrossoverMultiple",
    "CrossoverSigmoid",
    "CrossoverUniform",
    "Gaussian",
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
