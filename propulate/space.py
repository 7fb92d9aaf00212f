"""Search space: limits <-> typed parameters, the numeric embedding ``position``, and validation.

A search space is given as a dict ``limits`` mapping a parameter name to

- a 2-tuple of floats ``(low, high)``: a continuous parameter;
- a 2-tuple of ints ``(low, high)``: an integer parameter, both ends inclusive;
- a tuple of strings: a categorical parameter;
- a :class:`~propulate.parameters.Float`, :class:`~propulate.parameters.Integer` or
  :class:`~propulate.parameters.Categorical`: log scales, steps, and choices of numbers, booleans or ``None``.

The embedding ``position`` is a float64 vector with one slot per numeric parameter and one one-hot block
per categorical parameter (the category read back is the block's argmax, so continuous optimizers such as
particle swarms can move freely inside a block). The slot of a log-scale parameter holds the natural
logarithm of its value, so the box ``[lower, upper]`` the propagators keep their offspring in is
``[ln low, ln high]`` there; integers and stepped ranges are read back on their nearest value.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import logging
import math
import numbers
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from . import parameters
from .errors import SearchSpaceError

__all__ = ["Kind", "Parameter", "SearchSpace"]

log = logging.getLogger("propulate")

_warned_reversed: set[tuple[str, float, float]] = set()


class Kind(IntEnum):
    """The type of a parameter."""

    FLOAT = 0
    INT = 1
    CATEGORICAL = 2


@dataclass(frozen=True)
class Parameter:
    """One parameter of a search space.

    Attributes
    ----------
    name : str
        The parameter name, the key in ``limits``.
    kind : Kind
        Float, inclusive integer or categorical.
    low, high : float
        Bounds of a numeric parameter's values (``low <= high``); ``0`` and ``1`` for a categorical one.
    categories : tuple
        The choices of a categorical parameter, empty otherwise.
    offset : int
        Index of the parameter's first slot in ``position``.
    width : int
        Number of slots: 1 for a numeric parameter, ``len(categories)`` for a categorical one.
    log : bool
        Whether the slot holds the natural logarithm of the value.
    step : float or None
        The grid spacing of a stepped range (``1`` for an integer range without a step); ``None`` for a
        continuous or categorical parameter.
    domain : tuple or Float or Integer or Categorical
        What ``limits`` says, normalized: a 1.2.2 tuple (numeric ranges low-to-high) where one says it all.
    digits : int or None
        Decimal places a stepped float range's values are rounded to (those of ``low`` and ``step``), so
        that ``Float(0, 1, step=0.1)`` gives ``0.3``, not ``0.30000000000000004``.
    """

    name: str
    kind: Kind
    low: float
    high: float
    categories: tuple[Any, ...]
    offset: int
    width: int
    log: bool = False
    step: float | None = None
    domain: Any = None
    digits: int | None = None
    #: Whether the value read from the slot is not the slot itself (log scale, step or integer).
    transformed: bool = field(init=False)
    #: Whether the parameter is an integer range without log scale or step (rounded and clipped).
    plain_int: bool = field(init=False)

    def __post_init__(self) -> None:
        # Read on every decoding: attributes, not properties.
        object.__setattr__(self, "transformed", self.log or self.step is not None)
        object.__setattr__(self, "plain_int", self.kind is Kind.INT and not self.log and self.step == 1.0)

    @property
    def bounds(self) -> Any:
        """The parameter's entry of the normalized ``limits``: :attr:`domain`."""
        return self.domain

    @property
    def lower(self) -> float:
        """Lower end of the parameter's slot in the embedding (``ln low`` on a log scale)."""
        return math.log(self.low) if self.log else self.low

    @property
    def upper(self) -> float:
        """Upper end of the parameter's slot in the embedding (``ln high`` on a log scale)."""
        return math.log(self.high) if self.log else self.high

    def values(self, x: np.ndarray) -> np.ndarray:
        """Read numeric values from slot contents ``x`` (any shape): on the grid, inside ``[low, high]``."""
        x = np.asarray(x, dtype=np.float64)
        if self.log and self.kind is Kind.FLOAT:
            return np.array([self.value(float(v)) for v in x.ravel()]).reshape(x.shape)
        v = np.exp(x) if self.log else x
        if self.step is not None:
            v = self.low + np.round((v - self.low) / self.step) * self.step
            if self.digits is not None:
                v = np.round(v, self.digits)
        return np.clip(v, self.low, self.high)

    def value(self, x: float) -> float | int:
        """Read the value of slot content ``x``, of the parameter's type (see :meth:`values`)."""
        if self.log:
            # 12 significant digits: exp(ln(1e-3)) reads back as 1e-3, not 0.0010000000000000002, and a
            # value read back is a fixed point of log and exp: exp(ln(v)) is off by at most |ln v| + 1
            # units in the last place (1.6e-13 relative for any float64), less than half a unit in the
            # 12th significant digit (5e-13 relative at least).
            v = float(f"{math.exp(x):.12g}")
        else:
            v = x
        if self.step is not None:
            v = self.low + round((v - self.low) / self.step) * self.step
            if self.digits is not None:
                v = round(v, self.digits)
        if self.kind is Kind.INT:
            return int(min(max(round(v), self.low), self.high))
        return min(max(v, self.low), self.high) if self.transformed else v

    @property
    def grid(self) -> list[Any]:
        """Every value of a parameter with finitely many (categorical, integer or stepped)."""
        if self.kind is Kind.CATEGORICAL:
            return list(self.categories)
        assert self.step is not None, "a continuous range has no grid"
        n = round((self.high - self.low) / self.step)
        if self.kind is Kind.INT:
            return list(range(int(self.low), int(self.high) + 1, int(self.step)))
        return [self.value(self.low + k * self.step) for k in range(n + 1)]


def _is_int(x: object) -> bool:
    return type(x) is int or (isinstance(x, numbers.Integral) and not isinstance(x, bool))


def _is_real(x: object) -> bool:
    # Plain floats and ints first: the abstract-class check costs more than the rest of a mutation.
    return type(x) is float or type(x) is int or (isinstance(x, numbers.Real) and not isinstance(x, bool))


_HINT = "; for a choice of numbers, booleans or None use propulate.Categorical((...))"


def _parse_parameter(name: object, bounds: object, offset: int) -> Parameter:
    if not isinstance(name, str) or not name:
        raise SearchSpaceError(f"limits: parameter names must be non-empty strings, got {name!r}")
    if name.startswith("_"):
        raise SearchSpaceError(f"limits[{name!r}]: names starting with '_' are reserved for propulate")
    if isinstance(bounds, Mapping):  # a checkpoint's JSON form of Float, Integer or Categorical
        try:
            bounds = parameters.from_json(bounds)
        except SearchSpaceError as err:
            raise SearchSpaceError(f"limits[{name!r}]: {err}") from None
    if isinstance(bounds, (parameters.Float, parameters.Integer, parameters.Categorical)):
        return _parse_domain(name, bounds, offset)
    if not isinstance(bounds, (tuple, list)) or len(bounds) == 0:
        raise SearchSpaceError(
            f"limits[{name!r}]: expected (low, high), a tuple of category strings, or propulate.Float, "
            f"Integer or Categorical, got {bounds!r}"
        )
    if all(isinstance(b, str) for b in bounds):
        categories = tuple(bounds)
        if len(set(categories)) != len(categories):
            raise SearchSpaceError(f"limits[{name!r}]: categories must be distinct, got {categories!r}")
        return Parameter(
            name, Kind.CATEGORICAL, 0.0, 1.0, categories, offset, len(categories), domain=categories
        )
    if any(isinstance(b, str) for b in bounds):
        raise SearchSpaceError(f"limits[{name!r}]: mixes strings and numbers: {bounds!r}{_HINT}")
    if not all(_is_real(b) for b in bounds):
        raise SearchSpaceError(
            f"limits[{name!r}]: categories must be strings and ranges numbers, got {bounds!r}{_HINT}"
        )
    if len(bounds) != 2:
        raise SearchSpaceError(
            f"limits[{name!r}]: a numeric range must be a 2-tuple (low, high), got {len(bounds)} value(s)"
            f"{_HINT}"
        )
    low, high = (float(b) for b in bounds)
    given_low, given_high = bounds
    if not (math.isfinite(low) and math.isfinite(high)):
        raise SearchSpaceError(f"limits[{name!r}]: bounds must be finite numbers, got {bounds!r}")
    kind = Kind.INT if all(_is_int(b) for b in bounds) else Kind.FLOAT
    if low > high:
        if (name, low, high) not in _warned_reversed:
            _warned_reversed.add((name, low, high))
            log.warning(
                f"limits[{name!r}] = {tuple(bounds)!r} is high-to-low; using ({given_high!r}, {given_low!r})."
            )
        low, high = high, low
    if kind is Kind.INT:
        return Parameter(name, kind, low, high, (), offset, 1, step=1.0, domain=(int(low), int(high)))
    return Parameter(name, kind, low, high, (), offset, 1, domain=(low, high))


def _parse_domain(name: str, domain: parameters.Domain, offset: int) -> Parameter:
    """Return the parameter of a ``Float``, ``Integer`` or ``Categorical`` (validated when built)."""
    normal = parameters.normalized(domain)
    if isinstance(domain, parameters.Categorical):
        choices = domain.choices
        return Parameter(name, Kind.CATEGORICAL, 0.0, 1.0, choices, offset, len(choices), domain=normal)
    if isinstance(domain, parameters.Integer):
        step = float(domain.step)
        return Parameter(
            name, Kind.INT, float(domain.low), float(domain.high), (), offset, 1, domain.log, step, normal
        )
    digits = (
        None
        if domain.step is None
        else max(parameters.decimals(domain.low), parameters.decimals(domain.step))
    )
    return Parameter(
        name, Kind.FLOAT, domain.low, domain.high, (), offset, 1, domain.log, domain.step, normal, digits
    )


class SearchSpace:
    """A validated search space.

    Build it with :meth:`of`, which returns one shared object per distinct ``limits`` so that every
    individual of a run refers to the same space.

    Parameters
    ----------
    limits : Mapping[str, tuple]
        The search space as described in the module docstring. A numeric range given high-to-low is
        accepted (the same range low-to-high) with one warning.

    Raises
    ------
    SearchSpaceError
        (a ``ValueError``) for empty limits, reserved or non-string names, empty or mixed tuples, 1-tuples or
        longer tuples of numbers, non-string categories, duplicate categories, NaN or infinite bounds. The
        message names the parameter.
    """

    def __init__(self, limits: Mapping[str, Any]) -> None:
        if isinstance(limits, SearchSpace):
            limits = limits.limits
        if not isinstance(limits, Mapping):
            raise SearchSpaceError(f"limits: expected a dict of parameter name -> range, got {type(limits)}")
        if len(limits) == 0:
            raise SearchSpaceError("limits: the search space is empty")
        params = []
        offset = 0
        for name, bounds in limits.items():
            p = _parse_parameter(name, bounds, offset)
            params.append(p)
            offset += p.width
        self.parameters: tuple[Parameter, ...] = tuple(params)
        self.names: tuple[str, ...] = tuple(p.name for p in params)
        self.ndim: int = offset
        self.index: dict[str, Parameter] = {p.name: p for p in params}
        self.limits: dict[str, Any] = {p.name: p.bounds for p in params}
        lower = np.zeros(offset)
        upper = np.ones(offset)
        for p in params:
            if p.kind is not Kind.CATEGORICAL:
                lower[p.offset], upper[p.offset] = p.lower, p.upper
        lower.flags.writeable = False
        upper.flags.writeable = False
        self.lower: np.ndarray = lower
        self.upper: np.ndarray = upper
        # Slots whose decoded value is not the slot's own value: integers (rounded and clipped), log
        # scales and steps, and category blocks (argmax); see key().
        self._int_slots = np.array([p.offset for p in params if p.plain_int], dtype=np.intp)
        self._snapped = tuple(p for p in params if p.transformed and not p.plain_int)
        self._blocks = tuple((p.offset, p.width) for p in params if p.kind is Kind.CATEGORICAL)
        self._choice_index = {
            p.name: {parameters.typed(c): i for i, c in enumerate(p.categories)}
            for p in params
            if p.kind is Kind.CATEGORICAL
        }
        self.fingerprint: str = hashlib.sha1(repr(sorted(self.limits.items())).encode()).hexdigest()[:16]
        # The normalized limits in order, as a Python literal: equal for equal spaces, and all a pickle needs.
        self.signature: str = repr(tuple(self.to_json().items()))

    def to_json(self) -> dict[str, Any]:
        """Return the limits as JSON values (a checkpoint's configuration): lists, and objects for types.

        A 1.2.2 range or category tuple is written as a list; a :class:`~propulate.parameters.Float`,
        ``Integer`` or ``Categorical`` that no tuple expresses as an object with a ``"type"`` field.
        ``SearchSpace.of`` reads either back.
        """
        return {
            name: list(bounds) if isinstance(bounds, tuple) else parameters.to_json(bounds)
            for name, bounds in self.limits.items()
        }

    @staticmethod
    def of(limits: Mapping[str, Any] | SearchSpace) -> SearchSpace:
        """Return the shared space of ``limits`` (validated once, then cached)."""
        if isinstance(limits, SearchSpace):
            return limits
        if not isinstance(limits, Mapping):
            raise SearchSpaceError(f"limits: expected a dict of parameter name -> range, got {type(limits)}")
        if any(isinstance(bounds, Mapping) for bounds in limits.values()):
            limits = {name: _domain_of(name, bounds) for name, bounds in limits.items()}
        if not all(isinstance(bounds, (tuple, list, *_DOMAINS)) for bounds in limits.values()):
            # E.g. ("relu") instead of ("relu",): validation names the offending parameter.
            return SearchSpace(limits)
        try:
            # Types are part of the key: (0, 1) == (0.0, 1.0) in Python, but one is an int range.
            key = tuple(
                (
                    name,
                    (type(bounds), bounds)
                    if isinstance(bounds, _DOMAINS)
                    else tuple((type(b), b) for b in bounds),
                )
                for name, bounds in limits.items()
            )
            hash(key)
        except TypeError:
            # Unhashable or non-iterable bounds: validation names the offending parameter.
            return SearchSpace(limits)
        return _cached_space(key)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_space_of_signature, (self.signature,))

    def __repr__(self) -> str:
        return f"SearchSpace({self.limits!r})"

    @property
    def has_float(self) -> bool:
        """Whether the space has at least one continuous parameter."""
        return any(p.kind is Kind.FLOAT for p in self.parameters)

    @property
    def size(self) -> int | None:
        """The number of distinct configurations, or ``None`` if there are infinitely many.

        A float range of positive width has infinitely many values; one of zero width (``low == high``)
        has one, an integer or stepped range one per grid point, a categorical parameter one per category.
        """
        size = 1
        for p in self.parameters:
            if p.kind is Kind.FLOAT and p.step is None:
                if p.high > p.low:
                    return None
            else:
                size *= len(p.grid)
        return size

    def canonical(self, position: np.ndarray) -> bytes:
        """Return the values ``position`` decodes to, as bytes: equal for positions of equal values.

        Integers and stepped ranges are snapped and clipped, log scales read back, and categories read by
        argmax, as :meth:`decode_one` does, so that two positions that differ only inside a category block
        or below a grid's rounding give the same bytes; ``-0.0`` and ``0.0`` are one value. O(number of
        slots), without decoding into Python objects but for log scales and steps; the same in every
        process (what workers announce to each other).

        Parameters
        ----------
        position : numpy.ndarray
            An embedding of this space, shape ``(ndim,)``; not modified.
        """
        canonical = position + 0.0  # a copy in which -0.0 is 0.0
        ints = self._int_slots
        if ints.size:
            canonical[ints] = np.clip(np.round(canonical[ints]), self.lower[ints], self.upper[ints]) + 0.0
        for p in self._snapped:
            canonical[p.offset] = p.value(float(canonical[p.offset])) + 0.0
        for offset, width in self._blocks:
            block = canonical[offset : offset + width]
            which = block.argmax()
            block[:] = 0.0
            block[which] = 1.0
        return canonical.tobytes()

    def from_canonical(self, data: bytes) -> np.ndarray:
        """Return a position of the configuration that :meth:`canonical` wrote as ``data``.

        The inverse of :meth:`canonical` up to positions of equal values: a slot that :meth:`canonical`
        wrote as the decoded value of a log scale holds its logarithm again. Shape ``(ndim,)``, a new array.

        Raises
        ------
        ValueError
            If ``data`` is not ``8 * ndim`` bytes long.
        """
        if len(data) != 8 * self.ndim:
            raise ValueError(f"data: expected {8 * self.ndim} bytes of a configuration, got {len(data)}")
        position = np.frombuffer(data, dtype=np.float64).copy()
        for p in self._snapped:
            if p.log:
                position[p.offset] = math.log(position[p.offset])
        return position

    def key(self, position: np.ndarray) -> int:
        """Return a hash of the values ``position`` decodes to: ``hash`` of :meth:`canonical`.

        Python's hash, salted per process: compare keys within one process only (a worker announces
        :meth:`canonical` and its peers hash it).
        """
        return hash(self.canonical(position))

    def configurations(self) -> Iterator[np.ndarray]:
        """Yield the position of every configuration of a finite space, in lexicographic order.

        Raises
        ------
        ValueError
            If the space is infinite (see :attr:`size`).
        """
        if self.size is None:
            raise ValueError("configurations: the search space has a float range; it is infinite")
        choices = [[p.low] if p.kind is Kind.FLOAT and p.step is None else p.grid for p in self.parameters]
        for values in itertools.product(*choices):
            position = np.zeros(self.ndim)
            for p, value in zip(self.parameters, values, strict=True):
                self.encode_one(position, p, value)
            yield position

    def decode_one(self, position: np.ndarray, p: Parameter) -> Any:
        """Read parameter ``p`` from ``position``.

        A float range without log scale or step reads its slot as it is; integers and stepped ranges are
        snapped to their nearest value and clipped into ``[low, high]``, log scales exponentiated (and
        clipped: ``exp(ln high)`` may exceed ``high`` by a rounding), categories read by argmax.
        """
        if not p.transformed:
            if p.kind is Kind.FLOAT:
                return float(position[p.offset])
        elif p.plain_int:
            return int(min(max(round(float(position[p.offset])), p.low), p.high))
        if p.kind is Kind.CATEGORICAL:
            block = position[p.offset : p.offset + p.width]
            return p.categories[int(np.argmax(block))]
        return p.value(float(position[p.offset]))

    def encode_one(self, position: np.ndarray, p: Parameter, value: Any) -> None:
        """Write ``value`` of parameter ``p`` into ``position`` in place.

        A choice is looked up by type and value first (``True`` is not ``1``), then by equality (a numpy
        integer for an int choice); the slot of a log-scale parameter takes ``ln(value)``.

        Raises
        ------
        ValueError
            If ``value`` is not one of the categories of a categorical parameter, not a number for a
            numeric one, or not positive on a log scale.
        """
        if p.kind is Kind.CATEGORICAL:
            which = self._choice_index[p.name].get(parameters.typed(value))
            if which is None:
                equal = [i for i, c in enumerate(p.categories) if _same_choice(c, value)]
                if len(equal) != 1:
                    raise ValueError(f"{p.name}: {value!r} is not one of {p.categories!r}")
                which = equal[0]
            block = position[p.offset : p.offset + p.width]
            block[:] = 0.0
            block[which] = 1.0
            return
        if not _is_real(value):
            raise ValueError(f"{p.name}: expected a number, got {value!r}")
        if p.log:
            if not value > 0:
                raise ValueError(f"{p.name}: a log-scale parameter needs a positive value, got {value!r}")
            position[p.offset] = math.log(value)
        else:
            position[p.offset] = float(value)

    def encode(self, values: Mapping[str, Any]) -> np.ndarray:
        """Embed a dict of parameter values; shape ``(ndim,)``.

        Raises
        ------
        ValueError
            If a parameter is missing or unknown, or a value does not fit its parameter.
        """
        missing = [n for n in self.names if n not in values]
        unknown = [n for n in values if n not in self.index]
        if missing or unknown:
            raise ValueError(f"position: missing parameters {missing}, unknown parameters {unknown}")
        position = np.zeros(self.ndim)
        for p in self.parameters:
            self.encode_one(position, p, values[p.name])
        return position

    def check_inside(self, position: np.ndarray) -> None:
        """Raise if a numeric slot of ``position`` (shape ``(ndim,)``) lies outside its parameter's range.

        Positions built by :meth:`encode` from values of another space (an earlier run's, a user's list)
        may; those the propagators breed are clipped.

        Raises
        ------
        ValueError
            Naming the first parameter whose value is outside ``[low, high]``, and its range.
        """
        for p in self.parameters:
            if p.kind is Kind.CATEGORICAL:
                continue
            x = float(position[p.offset])
            slack = 1e-12 * max(1.0, abs(p.lower), abs(p.upper))
            if not p.lower - slack <= x <= p.upper + slack:
                value, low, high = math.exp(x) if p.log else x, p.low, p.high
                if p.kind is Kind.INT:
                    value, low, high = round(value), int(low), int(high)
                raise ValueError(f"{p.name}: {value!r} is outside [{low!r}, {high!r}]")

    def decode(self, position: np.ndarray) -> dict[str, Any]:
        """Return the dict of parameter values stored in ``position``."""
        return {p.name: self.decode_one(position, p) for p in self.parameters}

    def sample(self, rng: random.Random) -> np.ndarray:
        """Draw a position: each parameter's value as :meth:`sample_value` draws it."""
        position = np.zeros(self.ndim)
        for p in self.parameters:
            self.encode_one(position, p, self.sample_value(p, rng))
        return position

    @staticmethod
    def sample_value(p: Parameter, rng: random.Random) -> Any:
        """Draw one value of parameter ``p``.

        Uniform in a linear range (on its grid, if stepped) and over the choices; log-uniform on a log
        scale: a float ``exp(U(ln low, ln high))``, an integer rounded from ``exp(U(ln(low - 1/2),
        ln(high + 1/2)))`` (each integer with the probability of the interval that rounds to it, as Optuna
        samples ``suggest_int(..., log=True)``).
        """
        if p.kind is Kind.CATEGORICAL:
            return rng.choice(p.categories)
        if p.log:
            if p.kind is Kind.INT:
                x = rng.uniform(math.log(p.low - 0.5), math.log(p.high + 0.5))
                return int(min(max(round(math.exp(x)), p.low), p.high))
            return min(max(math.exp(rng.uniform(p.lower, p.upper)), p.low), p.high)
        if p.kind is Kind.INT:
            step = int(p.step or 1)
            if step == 1:
                return rng.randint(int(p.low), int(p.high))
            return int(p.low) + step * rng.randint(0, (int(p.high) - int(p.low)) // step)
        if p.step is not None:
            return min(p.low + p.step * rng.randint(0, round((p.high - p.low) / p.step)), p.high)
        return rng.uniform(p.low, p.high)

    def clip(self, position: np.ndarray) -> np.ndarray:
        """Clip ``position`` into the box ``[lower, upper]`` in place and return it."""
        np.clip(position, self.lower, self.upper, out=position)
        return position


_DOMAINS = (parameters.Float, parameters.Integer, parameters.Categorical)


def _same_choice(choice: Any, value: Any) -> bool:
    """Whether ``value`` stands for ``choice`` though of another type (a numpy scalar); never bool for int."""
    if isinstance(choice, bool) or isinstance(value, (bool, np.bool_)):
        return isinstance(value, (bool, np.bool_)) and isinstance(choice, bool) and bool(value) == choice
    if choice is None or value is None or isinstance(choice, str) != isinstance(value, str):
        return False
    try:
        return bool(choice == value) and (not _is_real(choice) or _is_int(choice) == _is_int(value))
    except (TypeError, ValueError):
        return False


# One space object per signature in this process, however its limits were spelled (reversed ranges, lists).
_by_signature: dict[str, SearchSpace] = {}


def _shared(space: SearchSpace) -> SearchSpace:
    return _by_signature.setdefault(space.signature, space)


@functools.lru_cache(maxsize=64)
def _cached_space(key: tuple[tuple[str, Any], ...]) -> SearchSpace:
    limits = {
        name: bounds[1] if bounds and isinstance(bounds[0], type) else tuple(b for _, b in bounds)
        for name, bounds in key
    }
    return _shared(SearchSpace(limits))


def _domain_of(name: object, bounds: Any) -> Any:
    """Return a JSON object of :meth:`SearchSpace.to_json` as its parameter type, anything else as it is."""
    if not isinstance(bounds, Mapping):
        return bounds
    try:
        return parameters.from_json(bounds)
    except SearchSpaceError as err:
        raise SearchSpaceError(f"limits[{name!r}]: {err}") from None


def _space_of_signature(signature: str) -> SearchSpace:
    """Unpickle a search space: a dictionary look-up, unless this process has not met the space yet."""
    space = _by_signature.get(signature)
    if space is None:
        space = SearchSpace.of(dict(ast.literal_eval(signature)))  # lists and JSON objects, as to_json
    return space
