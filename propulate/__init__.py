"""propulate: massively parallel, asynchronous, MPI-native evolutionary hyperparameter optimization.

The public names of Propulate 1.2.2 plus this package's own. Everything that needs MPI (``Propulator``,
``Islands``, ``Migrator``, ``Pollinator``, and :mod:`propulate.utils` with ``set_logger_config`` and
``get_default_propagator``) and every subpackage is imported on first use, so that reading a checkpoint
(:func:`propulate.checkpoint.load_checkpoint`) on a login node or in a notebook does not initialize MPI, and
``import propulate`` followed by ``propulate.utils.set_logger_config()`` works as it did in 1.2.2.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .individual import Individual, Status
from .parameters import Categorical, Float, Integer
from .surrogate import Surrogate

if TYPE_CHECKING:
    from . import propagators
    from .checkpoint import load_checkpoint
    from .checkpoint.evaluations import EvaluationCheckpoint, evaluation_checkpoint
    from .islands import Islands
    from .migrator import Migrator
    from .pollinator import Pollinator
    from .propulator import Propulator
    from .utils import get_default_propagator, set_logger_config

#: The one place the version is written: pyproject.toml reads it from here. A literal, so that
#: ``import propulate`` on every rank does not search the installed distributions for it.
__version__ = "2.0.0.dev0"

__all__ = [
    "Categorical",
    "EvaluationCheckpoint",
    "Float",
    "Individual",
    "Integer",
    "Islands",
    "Migrator",
    "Pollinator",
    "Propulator",
    "Status",
    "Surrogate",
    "__version__",
    "evaluation_checkpoint",
    "get_default_propagator",
    "load_checkpoint",
    "propagators",
    "set_logger_config",
]

# Name -> the module (relative to this package) that defines it.
_LAZY = {
    "EvaluationCheckpoint": "checkpoint.evaluations",
    "Islands": "islands",
    "Migrator": "migrator",
    "Pollinator": "pollinator",
    "Propulator": "propulator",
    "evaluation_checkpoint": "checkpoint.evaluations",
    "get_default_propagator": "utils",
    "load_checkpoint": "checkpoint",
    "set_logger_config": "utils",
}

# Subpackages and modules reachable as attributes after ``import propulate``, as in 1.2.2.
_SUBMODULES = frozenset(
    {
        "checkpoint",
        "errors",
        "islands",
        "migrator",
        "parameters",
        "pollinator",
        "population",
        "propagators",
        "propulator",
        "report",
        "run_results",
        "space",
        "surrogate",
        "trackers",
        "utils",
    }
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})
