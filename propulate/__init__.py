"""propulate: massively parallel, asynchronous, MPI-native evolutionary hyperparameter optimization.

The MPI-dependent names (``Propulator``, ``Islands``) are imported on first use, so that reading a checkpoint
(:func:`propulate.checkpoint.load_checkpoint`) on a login node or in a notebook does not initialize MPI.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .individual import Individual, Status
from .surrogate import Surrogate

if TYPE_CHECKING:
    from .checkpoint import load_checkpoint
    from .islands import Islands
    from .propulator import Propulator

try:
    __version__ = version("propulate")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["Individual", "Islands", "Propulator", "Status", "Surrogate", "__version__", "load_checkpoint"]

_LAZY = {"Islands": "islands", "Propulator": "propulator", "load_checkpoint": "checkpoint"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
