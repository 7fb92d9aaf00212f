"""propulate: massively parallel, asynchronous, MPI-native evolutionary hyperparameter optimization."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .individual import Individual
from .islands import Islands
from .propulator import Propulator

try:
    __version__ = version("propulate")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["Individual", "Islands", "Propulator", "__version__"]
