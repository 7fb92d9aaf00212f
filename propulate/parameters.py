"""Parameter types of a search space, beside Propulate 1.2.2's tuples.

A search space ``limits`` maps each parameter name to its domain. Propulate 1.2.2's tuples keep their
meaning — ``(0.0, 1.0)`` a float range, ``(1, 8)`` an inclusive integer range, ``("relu", "tanh")`` a
choice of strings — and three types say what tuples cannot:

- :class:`Float` ``(low, high, log=False, step=None)``: a float range, sampled log-uniformly with
  ``log=True`` (a learning rate), or on the grid ``low, low + step, ..., high``;
- :class:`Integer` ``(low, high, log=False, step=1)``: an inclusive integer range, log-uniform or with a step;
- :class:`Categorical` ``(choices)``: one of any values of the types ``str``, ``int``, ``float``, ``bool`` and
  ``None`` (the types Optuna's ``CategoricalDistribution`` and ConfigSpace accept, and what a JSON
  checkpoint holds exactly).

The names are ConfigSpace's (``Float``, ``Integer``, ``Categorical``); the arguments are Optuna's
(``suggest_float(name, low, high, step=None, log=False)``, ``suggest_categorical(name, choices)``).

>>> limits = {
...     "lr": Float(1e-5, 1e-1, log=True),
...     "dropout": Float(0.0, 0.5, step=0.1),
...     "layers": (1, 4),
...     "width": Integer(16, 1024, log=True),
...     "batch_size": Categorical((16, 32, 64)),
...     "batch_norm": Categorical((True, False)),
...     "activation": ("relu", "tanh"),
... }

A type that says no more than a tuple is the tuple: ``Float(0, 1)`` is ``(0.0, 1.0)``, ``Integer(1, 8)`` is
``(1, 8)``, ``Categorical(("a", "b"))`` is ``("a", "b")`` — the same search space, fingerprint and checkpoint.

How the optimizer sees them (:mod:`propulate.space`): a log range as the natural logarithm of its value, so
that every propagator — genetic operators, particle swarms, CMA-ES, Nelder–Mead — moves and keeps its
offspring in log space; a stepped range as its continuous hull, read back on the nearest grid point; a
choice as a one-hot block. What a loss function receives is always of the declared type and inside the
declared range.
"""

from __future__ import annotations

import decimal
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import SearchSpaceError

__all__ = ["Categorical", "Float", "Integer"]

#: The types a categorical choice may have.
CHOICE_TYPES = (str, bool, int, float, type(None))
_PYTHON_TYPES = frozenset(CHOICE_TYPES)


def _finite_real(what: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise SearchSpaceError(f"{what}: expected a number, got {x!r}")
    value = float(x)
    if not math.isfinite(value):
        raise SearchSpaceError(f"{what}: expected a finite number, got {x!r}")
    return value


def _integral(what: str, x: object) -> int:
    value = _finite_real(what, x)
    if value != int(value):
        raise SearchSpaceError(f"{what}: expected an integer, got {x!r}")
    return int(value)


def decimals(x: float) -> int:
    """Return the decimal places of ``x`` as ``repr`` writes it (``0.1``: 1, ``2.5e-05``: 6, ``3.0``: 0)."""
    exponent = decimal.Decimal(repr(x)).as_tuple().exponent
    return max(0, -int(exponent))


def _grid_size(what: str, low: float, high: float, step: float) -> int:
    """Return ``k`` with ``high == low + k * step`` (to rounding), or raise naming a valid ``high``."""
    k = round((high - low) / step)
    if abs(low + k * step - high) > 1e-9 * max(1.0, abs(high), abs(low)):
        below = low + math.floor((high - low) / step + 1e-9) * step
        below = round(below, max(decimals(low), decimals(step)))
        raise SearchSpaceError(
            f"{what}: high - low = {high - low!r} is not a multiple of step = {step!r}; use high={below!r}"
        )
    return int(k)


@dataclass(frozen=True)
class Float:
    """A float range ``[low, high]``, both ends included.

    Parameters
    ----------
    low, high : float
        The range, finite, ``low <= high``.
    log : bool
        Sample and search the logarithm of the value (log-uniform initialization; every propagator works on
        ``ln(value)``): for values spanning decades, such as a learning rate or a weight decay. Needs
        ``low > 0``.
    step : float, optional
        Only the values ``low + k * step``, ``k = 0, 1, ...``; ``high - low`` must be a multiple of it.
        Not with ``log``.

    Raises
    ------
    SearchSpaceError
        (a ``ValueError``) for non-finite bounds, ``low > high``, ``log`` with ``low <= 0``, a ``step`` that
        is not positive or does not divide the range, or ``log`` together with ``step``.

    Examples
    --------
    >>> Float(1e-5, 1e-1, log=True)
    Float(low=1e-05, high=0.1, log=True, step=None)
    >>> Float(0.0, 0.5, step=0.1)
    Float(low=0.0, high=0.5, log=False, step=0.1)
    """

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __post_init__(self) -> None:
        low = _finite_real("Float: low", self.low)
        high = _finite_real("Float: high", self.high)
        if low > high:
            raise SearchSpaceError(f"Float: low = {self.low!r} is greater than high = {self.high!r}")
        if not isinstance(self.log, bool):
            raise SearchSpaceError(f"Float: log must be True or False, got {self.log!r}")
        if self.log and low <= 0:
            raise SearchSpaceError(f"Float: log=True needs low > 0, got low = {self.low!r}")
        step = None
        if self.step is not None:
            if self.log:
                raise SearchSpaceError("Float: step and log=True cannot be combined")
            step = _finite_real("Float: step", self.step)
            if step <= 0:
                raise SearchSpaceError(f"Float: step must be positive, got {self.step!r}")
            _grid_size("Float", low, high, step)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)


@dataclass(frozen=True)
class Integer:
    """An integer range ``[low, high]``, both ends included.

    Parameters
    ----------
    low, high : int
        The range, ``low <= high`` (integral floats such as ``1e3`` are accepted).
    log : bool
        Sample and search the logarithm of the value (log-uniform initialization, as Optuna's
        ``suggest_int(..., log=True)``: each integer ``v`` drawn with a probability proportional to
        ``ln((v + 0.5) / (v - 0.5))``): for a layer width or a number of trees. Needs ``low >= 1``.
    step : int >= 1
        Only the values ``low + k * step``; ``high - low`` must be a multiple of it. Not with ``log``.

    Raises
    ------
    SearchSpaceError
        (a ``ValueError``) for non-integral bounds, ``low > high``, ``log`` with ``low < 1``, a ``step``
        that is not a positive integer or does not divide the range, or ``log`` with ``step > 1``.

    Examples
    --------
    >>> Integer(16, 1024, log=True)
    Integer(low=16, high=1024, log=True, step=1)
    """

    low: int
    high: int
    log: bool = False
    step: int = 1

    def __post_init__(self) -> None:
        low = _integral("Integer: low", self.low)
        high = _integral("Integer: high", self.high)
        if low > high:
            raise SearchSpaceError(f"Integer: low = {self.low!r} is greater than high = {self.high!r}")
        if not isinstance(self.log, bool):
            raise SearchSpaceError(f"Integer: log must be True or False, got {self.log!r}")
        if self.log and low < 1:
            raise SearchSpaceError(f"Integer: log=True needs low >= 1, got low = {self.low!r}")
        step = _integral("Integer: step", self.step)
        if step < 1:
            raise SearchSpaceError(f"Integer: step must be a positive integer, got {self.step!r}")
        if self.log and step != 1:
            raise SearchSpaceError("Integer: step and log=True cannot be combined")
        _grid_size("Integer", low, high, step)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "step", step)


@dataclass(frozen=True, eq=False)
class Categorical:
    """One of ``choices``.

    Parameters
    ----------
    choices : sequence or numpy array
        At least one value, each a ``str``, ``int``, ``float`` (finite), ``bool`` or ``None``, pairwise
        different in type or value (``1``, ``1.0`` and ``True`` are three choices). numpy scalars (and the
        elements of an array) are taken as the Python values they hold.

    Raises
    ------
    SearchSpaceError
        (a ``ValueError``) for no choices, a value of another type, NaN or an infinite float, or a repeated
        choice.

    Examples
    --------
    >>> Categorical((16, 32, 64))
    Categorical(choices=(16, 32, 64))
    >>> Categorical([True, False, None])
    Categorical(choices=(True, False, None))
    """

    choices: tuple[Any, ...]

    def __post_init__(self) -> None:
        given = self.choices
        if hasattr(given, "tolist") and not isinstance(given, Sequence):  # a numpy array
            given = given.tolist()
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise SearchSpaceError(f"Categorical: choices must be a sequence of values, got {self.choices!r}")
        choices = []
        for choice in given:
            # numpy scalars as the Python values they hold (numpy.float64 and numpy.str_ subclass float
            # and str, but pickle and print as numpy types).
            value = choice.item() if type(choice) not in _PYTHON_TYPES and hasattr(choice, "item") else choice
            if not isinstance(value, CHOICE_TYPES):
                raise SearchSpaceError(
                    f"Categorical: choices must be str, int, float, bool or None, got {choice!r} "
                    f"({type(choice).__name__})"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise SearchSpaceError(f"Categorical: choices must be finite, got {choice!r}")
            choices.append(value)
        if not choices:
            raise SearchSpaceError("Categorical: needs at least one choice")
        keys = [typed(c) for c in choices]
        if len(set(keys)) != len(keys):
            raise SearchSpaceError(f"Categorical: choices must be distinct, got {tuple(choices)!r}")
        object.__setattr__(self, "choices", tuple(choices))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Categorical):
            return NotImplemented
        return tuple(map(typed, self.choices)) == tuple(map(typed, other.choices))

    def __hash__(self) -> int:
        return hash(tuple(map(typed, self.choices)))


def typed(value: Any) -> tuple[type, Any]:
    """Key of a value by type and value: ``1``, ``1.0`` and ``True`` are equal in Python, not as choices."""
    return (type(value), value)


Domain = Float | Integer | Categorical


def normalized(bounds: Domain) -> Domain | tuple[Any, ...]:
    """Return the 1.2.2 tuple that means the same as ``bounds``, or ``bounds`` where no tuple does."""
    if isinstance(bounds, Float) and not bounds.log and bounds.step is None:
        return (bounds.low, bounds.high)
    if isinstance(bounds, Integer) and not bounds.log and bounds.step == 1:
        return (bounds.low, bounds.high)
    if isinstance(bounds, Categorical) and all(type(c) is str for c in bounds.choices):
        return bounds.choices
    return bounds


def to_json(bounds: Domain) -> dict[str, Any]:
    """Return ``bounds`` as a JSON object (a checkpoint's configuration); :func:`from_json` reads it back."""
    if isinstance(bounds, Categorical):
        return {"type": "categorical", "choices": list(bounds.choices)}
    kind = "float" if isinstance(bounds, Float) else "int"
    return {"type": kind, "low": bounds.low, "high": bounds.high, "log": bounds.log, "step": bounds.step}


def from_json(entry: Mapping[str, Any]) -> Domain:
    """Build a parameter type from what :func:`to_json` wrote.

    Raises
    ------
    SearchSpaceError
        If ``entry`` names no known type or lacks one of its fields.
    """
    kind = entry.get("type")
    fields = {k: v for k, v in entry.items() if k != "type"}
    try:
        if kind == "float":
            return Float(**fields)
        if kind == "int":
            return Integer(**fields)
        if kind == "categorical":
            return Categorical(**fields)
    except TypeError as err:
        raise SearchSpaceError(f"{entry!r}: {err}") from None
    raise SearchSpaceError(f"expected a type 'float', 'int' or 'categorical', got {entry!r}")
