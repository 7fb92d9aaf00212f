"""Checks at the public boundary: a ``ValueError`` that names the argument and what it may be."""

from __future__ import annotations

import math
import numbers

__all__ = ["check_choice", "check_int", "check_probability", "check_real", "check_seconds"]


def check_int(
    name: str, value: object, minimum: int, allowed: str | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` as an int if it is one (not a bool), at least ``minimum`` and at most ``maximum``.

    Raises
    ------
    ValueError
        Naming ``name`` and ``allowed`` (default: "an int >= minimum", or "an int in [minimum, maximum]").
    """
    number = int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        default = f"an int >= {minimum}" if maximum is None else f"an int in [{minimum}, {maximum}]"
        raise ValueError(f"{name}: expected {allowed or default}, got {value!r}")
    return number


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``.

    Raises
    ------
    ValueError
        Naming ``name`` and the choices.
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: expected {' or '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def check_real(name: str, value: object, minimum: float | None = None) -> float:
    """Return ``value`` as a float if it is a finite number (not a bool), at least ``minimum`` if given.

    Raises
    ------
    ValueError
        Naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if minimum is not None and float(value) < minimum:
        raise ValueError(f"{name}: expected a number >= {minimum}, got {value!r}")
    return float(value)


def check_probability(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a number in [0, 1].

    Raises
    ------
    ValueError
        Naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= 1:
        raise ValueError(f"{name}: expected a probability in [0, 1], got {value!r}")
    return float(value)


def check_seconds(name: str, value: object, positive: bool = False) -> float:
    """Return ``value`` as a float if it is a finite number of seconds, >= 0 (or > 0 with ``positive``).

    Raises
    ------
    ValueError
        Naming ``name``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(float(value))
        or float(value) < 0
        or (positive and float(value) == 0)
    ):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name}: expected a number of seconds {bound}, got {value!r}")
    return float(value)
