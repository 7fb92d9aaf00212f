"""Search space: limits <-> typed parameters, the numeric embedding ``position``, and validation.

A search space is given as a dict ``limits`` mapping a parameter name to

- a 2-tuple of floats ``(low, high)``: a continuous parameter;
- a 2-tuple of ints ``(low, high)``: an integer parameter, both ends inclusive;
- a tuple of strings: a categorical parameter.

The embedding ``position`` is a float64 vector with one slot per numeric parameter and one one-hot block
per categorical parameter (the category read back is the block's argmax, so continuous optimizers such as
particle swarms can move freely inside a block).
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
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

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
        Bounds of a numeric parameter (``low <= high``); ``0`` and ``1`` for a categorical one.
    categories : tuple of str
        The categories of a categorical parameter, empty otherwise.
    offset : int
        Index of the parameter's first slot in ``position``.
    width : int
        Number of slots: 1 for a numeric parameter, ``len(categories)`` for a categorical one.
    """

    name: str
    kind: Kind
    low: float
    high: float
    categories: tuple[str, ...]
    offset: int
    width: int

    @property
    def bounds(self) -> tuple[Any, ...]:
        """The parameter's entry of the normalized ``limits`` (numeric ranges low-to-high)."""
        if self.kind is Kind.CATEGORICAL:
            return self.categories
        if self.kind is Kind.INT:
            return (int(self.low), int(self.high))
        return (float(self.low), float(self.high))


def _is_int(x: object) -> bool:
    return type(x) is int or (isinstance(x, numbers.Integral) and not isinstance(x, bool))


def _is_real(x: object) -> bool:
    # Plain floats and ints first: the abstract-class check costs more than the rest of a mutation.
    return type(x) is float or type(x) is int or (isinstance(x, numbers.Real) and not isinstance(x, bool))


def _parse_parameter(name: object, bounds: object, offset: int) -> Parameter:
    if not isinstance(name, str) or not name:
        raise SearchSpaceError(f"limits: parameter names must be non-empty strings, got {name!r}")
    if name.startswith("_"):
        raise SearchSpaceError(f"limits[{name!r}]: names starting with '_' are reserved for propulate")
    if not isinstance(bounds, (tuple, list)) or len(bounds) == 0:
        raise SearchSpaceError(
            f"limits[{name!r}]: expected (low, high) or a tuple of category strings, got {bounds!r}"
        )
    if all(isinstance(b, str) for b in bounds):
        categories = tuple(bounds)
        if len(set(categories)) != len(categories):
            raise SearchSpaceError(f"limits[{name!r}]: categories must be distinct, got {categories!r}")
        return Parameter(name, Kind.CATEGORICAL, 0.0, 1.0, categories, offset, len(categories))
    if any(isinstance(b, str) for b in bounds):
        raise SearchSpaceError(f"limits[{name!r}]: mixes strings and numbers: {bounds!r}")
    if not all(_is_real(b) for b in bounds):
        raise SearchSpaceError(
            f"limits[{name!r}]: categories must be strings and ranges numbers, got {bounds!r}"
        )
    if len(bounds) != 2:
        raise SearchSpaceError(
            f"limits[{name!r}]: a numeric range must be a 2-tuple (low, high), got {len(bounds)} value(s)"
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
    return Parameter(name, kind, low, high, (), offset, 1)


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
        self.limits: dict[str, tuple[Any, ...]] = {p.name: p.bounds for p in params}
        lower = np.zeros(offset)
        upper = np.ones(offset)
        for p in params:
            if p.kind is not Kind.CATEGORICAL:
                lower[p.offset], upper[p.offset] = p.low, p.high
        lower.flags.writeable = False
        upper.flags.writeable = False
        self.lower: np.ndarray = lower
        self.upper: np.ndarray = upper
        # Slots whose decoded value is not the slot's own value: integers (rounded and clipped) and
        # category blocks (argmax); see key().
        self._int_slots = np.array([p.offset for p in params if p.kind is Kind.INT], dtype=np.intp)
        self._blocks = tuple((p.offset, p.width) for p in params if p.kind is Kind.CATEGORICAL)
        self.fingerprint: str = hashlib.sha1(repr(sorted(self.limits.items())).encode()).hexdigest()[:16]
        # The normalized limits in order, as a Python literal: equal for equal spaces, and all a pickle needs.
        self.signature: str = repr(tuple(self.limits.items()))

    @staticmethod
    def of(limits: Mapping[str, Any] | SearchSpace) -> SearchSpace:
        """Return the shared space of ``limits`` (validated once, then cached)."""
        if isinstance(limits, SearchSpace):
            return limits
        if not isinstance(limits, Mapping):
            raise SearchSpaceError(f"limits: expected a dict of parameter name -> range, got {type(limits)}")
        if not all(isinstance(bounds, (tuple, list)) for bounds in limits.values()):
            # E.g. ("relu") instead of ("relu",): validation names the offending parameter.
            return SearchSpace(limits)
        try:
            # Types are part of the key: (0, 1) == (0.0, 1.0) in Python, but one is an int range.
            key = tuple((name, tuple((type(b), b) for b in bounds)) for name, bounds in limits.items())
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
        has one, an integer range ``high - low + 1``, a categorical parameter one per category.
        """
        size = 1
        for p in self.parameters:
            if p.kind is Kind.FLOAT:
                if p.high > p.low:
                    return None
            elif p.kind is Kind.INT:
                size *= int(p.high) - int(p.low) + 1
            else:
                size *= p.width
        return size

    def canonical(self, position: np.ndarray) -> bytes:
        """Return the values ``position`` decodes to, as bytes: equal for positions of equal values.

        Integers are rounded and clipped and categories read by argmax, as :meth:`decode_one` does, so
        that two positions that differ only inside a category block or below an integer's rounding give
        the same bytes; ``-0.0`` and ``0.0`` are one value. O(number of slots), without decoding into
        Python objects; the same in every process (what workers announce to each other).

        Parameters
        ----------
        position : numpy.ndarray
            An embedding of this space, shape ``(ndim,)``; not modified.
        """
        canonical = position + 0.0  # a copy in which -0.0 is 0.0
        ints = self._int_slots
        if ints.size:
            canonical[ints] = np.clip(np.round(canonical[ints]), self.lower[ints], self.upper[ints]) + 0.0
        for offset, width in self._blocks:
            block = canonical[offset : offset + width]
            which = block.argmax()
            block[:] = 0.0
            block[which] = 1.0
        return canonical.tobytes()

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
        choices: list[list[Any]] = []
        for p in self.parameters:
            if p.kind is Kind.FLOAT:
                choices.append([p.low])
            elif p.kind is Kind.INT:
                choices.append(list(range(int(p.low), int(p.high) + 1)))
            else:
                choices.append(list(p.categories))
        for values in itertools.product(*choices):
            position = np.zeros(self.ndim)
            for p, value in zip(self.parameters, values, strict=True):
                self.encode_one(position, p, value)
            yield position

    def decode_one(self, position: np.ndarray, p: Parameter) -> Any:
        """Read parameter ``p`` from ``position`` (ints rounded and clipped, categories by argmax)."""
        if p.kind is Kind.FLOAT:
            return float(position[p.offset])
        if p.kind is Kind.INT:
            return int(min(max(round(float(position[p.offset])), p.low), p.high))
        block = position[p.offset : p.offset + p.width]
        return p.categories[int(np.argmax(block))]

    def encode_one(self, position: np.ndarray, p: Parameter, value: Any) -> None:
        """Write ``value`` of parameter ``p`` into ``position`` in place.

        Raises
        ------
        ValueError
            If ``value`` is not one of the categories of a categorical parameter, or not a number for a
            numeric one.
        """
        if p.kind is Kind.CATEGORICAL:
            try:
                which = p.categories.index(value)
            except ValueError:
                raise ValueError(f"{p.name}: {value!r} is not one of {p.categories!r}") from None
            block = position[p.offset : p.offset + p.width]
            block[:] = 0.0
            block[which] = 1.0
            return
        if not _is_real(value):
            raise ValueError(f"{p.name}: expected a number, got {value!r}")
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

    def decode(self, position: np.ndarray) -> dict[str, Any]:
        """Return the dict of parameter values stored in ``position``."""
        return {p.name: self.decode_one(position, p) for p in self.parameters}

    def sample(self, rng: random.Random) -> np.ndarray:
        """Draw a position uniformly: floats and ints uniform in their range, categories uniform."""
        position = np.zeros(self.ndim)
        for p in self.parameters:
            self.encode_one(position, p, self.sample_value(p, rng))
        return position

    @staticmethod
    def sample_value(p: Parameter, rng: random.Random) -> Any:
        """Draw one value of parameter ``p`` uniformly."""
        if p.kind is Kind.FLOAT:
            return rng.uniform(p.low, p.high)
        if p.kind is Kind.INT:
            return rng.randint(int(p.low), int(p.high))
        return rng.choice(p.categories)

    def clip(self, position: np.ndarray) -> np.ndarray:
        """Clip ``position`` into the box ``[lower, upper]`` in place and return it."""
        np.clip(position, self.lower, self.upper, out=position)
        return position


# One space object per signature in this process, however its limits were spelled (reversed ranges, lists).
_by_signature: dict[str, SearchSpace] = {}


def _shared(space: SearchSpace) -> SearchSpace:
    return _by_signature.setdefault(space.signature, space)


@functools.lru_cache(maxsize=64)
def _cached_space(key: tuple[tuple[str, tuple[tuple[type, Any], ...]], ...]) -> SearchSpace:
    return _shared(SearchSpace({name: tuple(b for _, b in bounds) for name, bounds in key}))


def _space_of_signature(signature: str) -> SearchSpace:
    """Unpickle a search space: a dictionary look-up, unless this process has not met the space yet."""
    space = _by_signature.get(signature)
    if space is None:
        space = SearchSpace.of(dict(ast.literal_eval(signature)))
    return space
