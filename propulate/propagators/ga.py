"""Genetic operators: point mutations, Gaussian interval mutation and crossovers.

Each operator copies its parents (:meth:`Individual.child`) and never changes an individual it was given.
Offspring stay inside the limits: new values are drawn inside the range, Gaussian steps are clipped.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ..individual import Individual, loss_order
from ..space import Kind, Parameter, SearchSpace
from ..validation import check_int
from .base import Stochastic

__all__ = [
    "CrossoverMultiple",
    "CrossoverSigmoid",
    "CrossoverUniform",
    "IntervalMutationNormal",
    "PointMutation",
    "RandomPointMutation",
]


class PointMutation(Stochastic):
    """Redraw ``points`` distinct parameters uniformly from their ranges.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    points : int in [1, number of parameters]
        How many parameters to redraw.
    probability : float in [0, 1]
        Probability of mutating; otherwise the parent is copied unchanged.
    rng : random.Random, optional
        The generator owned by this propagator.

    Raises
    ------
    ValueError
        If ``points`` is not in [1, number of parameters].
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        points: int = 1,
        probability: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(1, 1, probability, rng)
        self.space = SearchSpace.of(limits)
        self.points = check_int("points", points, 1)
        if points > len(self.space.parameters):
            raise ValueError(f"points: cannot mutate {points} of {len(self.space.parameters)} parameters")

    def _n_points(self) -> int:
        return self.points

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        child = inds[0].child()
        if self.rng.random() < self.probability:
            for p in _draw(self.rng, self.space.parameters, self._n_points()):
                self.space.encode_one(child.position, p, self.space.sample_value(p, self.rng))
        return [child]


class RandomPointMutation(PointMutation):
    """Redraw a random number, uniform in ``[min_points, max_points]``, of distinct parameters.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    min_points, max_points : int
        Bounds on the number of parameters to redraw, ``1 <= min_points <= max_points <= n_parameters``.
    probability : float in [0, 1]
        Probability of mutating.
    rng : random.Random, optional
        The generator owned by this propagator.

    Raises
    ------
    ValueError
        If the bounds are not ordered or outside [1, number of parameters].
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        min_points: int,
        max_points: int,
        probability: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(limits, check_int("max_points", max_points, 1), probability, rng)
        self.min_points = check_int("min_points", min_points, 1)
        if min_points > max_points:
            raise ValueError(f"min_points: must not exceed max_points={max_points}, got {min_points}")
        self.max_points = max_points

    def _n_points(self) -> int:
        return self.rng.randint(self.min_points, self.max_points)


class IntervalMutationNormal(Stochastic):
    """Add Gaussian noise to ``points`` distinct float parameters, clipped to their ranges.

    The step of parameter ``i`` is drawn from N(0, (sigma_factor * (high_i - low_i))²).

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    sigma_factor : float > 0
        Standard deviation as a fraction of each parameter's range.
    points : int in [1, number of float parameters]
        How many float parameters to perturb.
    probability : float in [0, 1]
        Probability of mutating.
    rng : random.Random, optional
        The generator owned by this propagator.

    Raises
    ------
    ValueError
        If ``sigma_factor`` is not positive or the space has fewer than ``points`` float parameters.
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        sigma_factor: float = 0.1,
        points: int = 1,
        probability: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(1, 1, probability, rng)
        self.space = SearchSpace.of(limits)
        self.floats = [p for p in self.space.parameters if p.kind is Kind.FLOAT]
        if not (isinstance(sigma_factor, (int, float)) and sigma_factor > 0 and math.isfinite(sigma_factor)):
            raise ValueError(f"sigma_factor: expected a positive number, got {sigma_factor!r}")
        self.sigma_factor = float(sigma_factor)
        self.points = check_int("points", points, 1)
        if points > len(self.floats):
            raise ValueError(
                f"points: the search space has {len(self.floats)} float parameter(s), cannot mutate {points}"
            )

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        child = inds[0].child()
        if self.rng.random() < self.probability:
            for p in _draw(self.rng, self.floats, self.points):
                # In the embedding: on a log scale a step of the logarithm, inside [ln low, ln high].
                step = self.rng.gauss(0.0, self.sigma_factor * (p.upper - p.lower))
                child.position[p.offset] = min(max(child.position[p.offset] + step, p.lower), p.upper)
        return [child]


def _draw(rng: random.Random, items: Sequence[Parameter], k: int) -> list[Parameter]:
    """Draw ``k`` distinct items; for one item, ``choice`` draws what ``sample`` would, at less cost."""
    return [rng.choice(items)] if k == 1 else rng.sample(items, k)


def _copy_parameter(child: Individual, parent: Individual, offset: int, width: int) -> None:
    if width == 1:
        # A numeric parameter: one slot, set directly (a slice assignment costs four times as much).
        child.position[offset] = parent.position[offset]
    else:
        child.position[offset : offset + width] = parent.position[offset : offset + width]


class CrossoverUniform(Stochastic):
    """Uniform crossover of two parents into one child.

    Each parameter comes from the first parent with probability ``relative_parent_contribution``, else from
    the second.

    Parameters
    ----------
    relative_parent_contribution : float in [0, 1]
        Probability of taking a parameter from the first parent.
    probability : float in [0, 1]
        Probability of crossing over; otherwise the first parent is copied.
    rng : random.Random, optional
        The generator owned by this propagator.
    """

    def __init__(
        self,
        relative_parent_contribution: float = 0.5,
        probability: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(2, 1, probability, rng)
        if not (
            isinstance(relative_parent_contribution, (int, float)) and 0 <= relative_parent_contribution <= 1
        ):
            raise ValueError(
                "relative_parent_contribution: expected a number in [0, 1], "
                f"got {relative_parent_contribution!r}"
            )
        self.relative_parent_contribution = float(relative_parent_contribution)

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        first, second = inds[0], inds[1]
        child = first.child()
        if self.rng.random() < self.probability:
            for p in child.space.parameters:
                if self.rng.random() >= self.relative_parent_contribution:
                    _copy_parameter(child, second, p.offset, p.width)
        return [child]


class CrossoverMultiple(Stochastic):
    """Crossover of several parents: each parameter comes from a parent drawn uniformly.

    Parameters
    ----------
    parents : int
        Number of parents, ``-1`` for all given.
    probability : float in [0, 1]
        Probability of crossing over; otherwise the first parent is copied.
    rng : random.Random, optional
        The generator owned by this propagator.
    """

    def __init__(self, parents: int = -1, probability: float = 1.0, rng: random.Random | None = None) -> None:
        super().__init__(parents, 1, probability, rng)

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        pool = inds if self.parents == -1 else inds[: self.parents]
        child = pool[0].child()
        if self.rng.random() < self.probability:
            for p in child.space.parameters:
                _copy_parameter(child, self.rng.choice(pool), p.offset, p.width)
        return [child]


class CrossoverSigmoid(Stochastic):
    """Crossover of two parents that favours the better one.

    Each parameter is taken from the parent of lower loss with probability
    ``sigmoid((f_worse - f_better) / temperature)`` >= 1/2, else from the other parent. A large temperature
    approaches uniform crossover; a small one copies the better parent.

    Parameters
    ----------
    temperature : float > 0
        Scale of loss differences.
    probability : float in [0, 1]
        Probability of crossing over; otherwise the better parent is copied.
    rng : random.Random, optional
        The generator owned by this propagator.

    Raises
    ------
    ValueError
        If ``temperature`` is not positive.
    """

    def __init__(
        self, temperature: float = 1.0, probability: float = 1.0, rng: random.Random | None = None
    ) -> None:
        super().__init__(2, 1, probability, rng)
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(f"temperature: expected a positive number, got {temperature!r}")
        self.temperature = float(temperature)

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        better, worse = sorted(inds[:2], key=loss_order)
        child = better.child()
        if self.rng.random() < self.probability:
            gap = worse.loss - better.loss
            if math.isnan(gap):
                keep_better = 0.5
            else:
                # sigmoid(gap / T), written to avoid overflow for large gaps.
                keep_better = 1.0 / (1.0 + math.exp(-min(gap / self.temperature, 700.0)))
            for p in child.space.parameters:
                if self.rng.random() >= keep_better:
                    _copy_parameter(child, worse, p.offset, p.width)
        return [child]
