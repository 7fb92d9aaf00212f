"""Explore: perturb a configuration the way population-based training does after an exploit.

Jaderberg et al., "Population Based Training of Neural Networks", arXiv:1711.09846 (2017), section 3.1 and
appendix A: each hyperparameter is resampled from its prior with some probability, otherwise perturbed by a
factor. The knobs and their defaults are those of Ray Tune's ``PopulationBasedTraining``
(``resample_probability=0.25``, ``perturbation_factors=(1.2, 0.8)``), with the perturbation adapted to each
parameter type of :mod:`propulate.parameters`:

- a float is multiplied by a factor drawn from ``perturbation_factors``; on a log scale that is a shift of
  its logarithm by the factor's (its own scale); a linear value of 0, which no factor moves, is shifted by
  ``(factor - 1)`` times the range's width instead;
- an integer or a stepped range is multiplied likewise and read back on its grid; where that lands on the
  same grid point, it moves one point in the factor's direction, so a perturbation never stands still
  inside the range;
- a categorical parameter moves to a neighbouring choice in the declared order (one up or down, staying at
  an end), as Ray shifts a list of choices;
- every result is kept inside the declared range.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ..space import Kind, Parameter, SearchSpace
from ..validation import check_probability

__all__ = ["check_factors", "explore", "perturb"]


def check_factors(perturbation_factors: Sequence[float]) -> tuple[float, ...]:
    """Return ``perturbation_factors`` as a tuple of positive finite floats.

    Raises
    ------
    ValueError
        If it is empty or holds a value that is not a positive finite number (named in the message).
    """
    try:
        factors = tuple(float(f) for f in perturbation_factors)
    except (TypeError, ValueError):
        raise ValueError(
            f"perturbation_factors: expected a sequence of positive numbers, got {perturbation_factors!r}"
        ) from None
    if not factors or not all(math.isfinite(f) and f > 0 for f in factors):
        raise ValueError(
            "perturbation_factors: expected a non-empty sequence of positive numbers, "
            f"got {perturbation_factors!r}"
        )
    return factors


def perturb(p: Parameter, value: Any, factor: float, rng: random.Random) -> Any:
    """Return ``value`` of parameter ``p`` perturbed by ``factor`` (see the module docstring)."""
    if p.kind is Kind.CATEGORICAL:
        index = p.categories.index(value) if value in p.categories else rng.randrange(len(p.categories))
        return p.categories[min(max(index + rng.choice((-1, 1)), 0), len(p.categories) - 1)]
    moved = value * factor if value != 0 or p.log else value + (factor - 1.0) * (p.high - p.low)
    new = _read(p, moved)
    if p.step is not None and new == value and moved != value:
        new = _read(p, value + p.step if moved > value else value - p.step)
    return new


def _read(p: Parameter, value: float) -> Any:
    """Return the value of ``p`` nearest to ``value``: of its type, on its grid, inside its range."""
    value = min(max(value, p.low), p.high)
    return p.value(math.log(value) if p.log else value)


def explore(
    params: Mapping[str, Any],
    space: SearchSpace,
    rng: random.Random,
    resample_probability: float = 0.25,
    perturbation_factors: Sequence[float] = (1.2, 0.8),
) -> dict[str, Any]:
    """Return a perturbed copy of the configuration ``params`` of ``space``.

    Each parameter is, with probability ``resample_probability``, drawn anew from the search space
    (:meth:`SearchSpace.sample_value`), else perturbed (:func:`perturb`) by a factor drawn uniformly from
    ``perturbation_factors``.

    Parameters
    ----------
    params : Mapping[str, Any]
        One value per parameter of ``space``.
    space : SearchSpace
        The search space; every value returned lies in it.
    rng : random.Random
        The caller's generator.
    resample_probability : float in [0, 1]
        Probability of drawing a parameter anew instead of perturbing it.
    perturbation_factors : sequence of float > 0
        The factors a numeric value is multiplied by; a categorical parameter moves to a neighbouring choice.

    Raises
    ------
    ValueError
        For an out-of-range ``resample_probability`` or ``perturbation_factors`` (named in the message).
    """
    check_probability("resample_probability", resample_probability)
    factors = check_factors(perturbation_factors)
    explored = {}
    for p in space.parameters:
        if rng.random() < resample_probability:
            explored[p.name] = space.sample_value(p, rng)
        else:
            explored[p.name] = perturb(p, params[p.name], rng.choice(factors), rng)
    return explored
