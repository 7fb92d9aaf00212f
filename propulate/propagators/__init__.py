"""Propagators (evolutionary operators): genetic operators, PSO, CMA-ES, Nelder–Mead, NSGA-II, TPE."""

from .base import (
    Compose,
    Conditional,
    Gaussian,
    InitUniform,
    Propagator,
    SelectMax,
    SelectMin,
    SelectParetoBest,
    SelectParetoWorst,
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
from .nsga2 import NSGA2
from .pso import (
    BasicPSO,
    CanonicalPSO,
    ConstrictionPSO,
    InitUniformPSO,
    StatelessPSO,
    VelocityClampingPSO,
)
from .tpe import TPE

__all__ = [
    "NSGA2",
    "TPE",
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
    "SelectParetoBest",
    "SelectParetoWorst",
    "SelectUniform",
    "StatelessPSO",
    "Stochastic",
    "VelocityClampingPSO",
]
