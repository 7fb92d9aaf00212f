"""Particle swarm optimization (PSO) as asynchronous propagators.

Every worker of an island moves one particle. The particle of a worker is its latest individual (highest
generation among those with ``rank`` equal to the worker's island rank), its personal best ``p_best`` is its
best individual, and the swarm best ``g_best`` is the best individual given. One breeding is one move::

    v' = w v + c_cognitive r_1 * (p_best - x) + c_social r_2 * (g_best - x)
    x' = x + v'

with ``r_1, r_2`` drawn uniformly from [0, 1) per dimension (Kennedy & Eberhart 1995; inertia weight ``w``:
Shi & Eberhart 1998). The move happens in the numeric embedding ``Individual.position``; a categorical
parameter is a block of one-hot slots in [0, 1] whose argmax is the category.

Boundary rule ("absorbing walls", Robinson & Rahmat-Samii 2004): a component of ``x'`` outside
``[lower, upper]`` (or not finite, after an overflow) is set to the violated bound and the same component of
``v'`` to zero, so offspring always stay inside the limits and the stored velocity is the one really used.

A worker without a particle (at the start, or after its particles emigrated) initializes one uniformly,
as :class:`InitUniformPSO` does.

References
----------
J. Kennedy and R. Eberhart, "Particle swarm optimization", Proc. ICNN'95, 1995.
Y. Shi and R. Eberhart, "A modified particle swarm optimizer", Proc. IEEE ICEC, 1998.
M. Clerc and J. Kennedy, "The particle swarm - explosion, stability, and convergence in a multidimensional
complex space", IEEE Trans. Evol. Comput. 6(1), 2002.
R. Poli, J. Kennedy and T. Blackwell, "Particle swarm optimization", Swarm Intelligence 1, 33-57, 2007.
J. Robinson and Y. Rahmat-Samii, "Particle swarm optimization in electromagnetics", IEEE Trans. Antennas
Propag. 52(2), 2004.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..individual import Individual, loss_order
from ..space import SearchSpace
from ..validation import check_int, check_real
from .base import Propagator, Stochastic

__all__ = [
    "BasicPSO",
    "CanonicalPSO",
    "ConstrictionPSO",
    "InitUniformPSO",
    "StatelessPSO",
    "VelocityClampingPSO",
    "constriction_coefficient",
]


def _per_slot(name: str, value: object, space: SearchSpace) -> np.ndarray:
    """Expand a non-negative factor (a number, or one per parameter or per slot) to shape ``(ndim,)``."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        factors = np.full(space.ndim, float(value))
    else:
        array = np.asarray(value, dtype=np.float64)
        if array.shape == (space.ndim,):
            factors = array.copy()
        elif array.shape == (len(space.parameters),):
            factors = np.repeat(array, [p.width for p in space.parameters])
        else:
            raise ValueError(
                f"{name}: expected a number or an array of shape ({len(space.parameters)},) (one per "
                f"parameter) or ({space.ndim},) (one per slot), got {value!r}"
            )
    if not (np.all(np.isfinite(factors)) and np.all(factors >= 0)):
        raise ValueError(f"{name}: expected finite factors >= 0, got {value!r}")
    return factors


def constriction_coefficient(c_cognitive: float, c_social: float) -> float:
    """Return Clerc and Kennedy's constriction coefficient ``chi = 2 / |2 - phi - sqrt(phi^2 - 4 phi)|``.

    Parameters
    ----------
    c_cognitive, c_social : float
        The acceleration coefficients; ``phi = c_cognitive + c_social`` must exceed 4.

    Raises
    ------
    ValueError
        If ``c_cognitive + c_social <= 4``.
    """
    phi = c_cognitive + c_social
    if not phi > 4:
        raise ValueError(f"c_cognitive + c_social: must exceed 4 for constriction, got {phi!r}")
    return 2.0 / abs(2.0 - phi - math.sqrt(phi * phi - 4.0 * phi))  # Clerc & Kennedy 2002


class InitUniformPSO(Stochastic):
    """Create a particle at a uniformly drawn position with a uniformly drawn velocity.

    Positions are drawn as :meth:`SearchSpace.sample` does; velocity component ``i`` is uniform in
    ``[-v_init_limit_i * (upper_i - lower_i), +v_init_limit_i * (upper_i - lower_i)]``.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    rank : int >= 0
        The worker the particle belongs to; :meth:`bind` replaces it with the worker's island rank.
    parents : int in {0, 1}
        With 0 it always creates a particle. With 1 it creates one with ``probability`` and otherwise
        passes a copy of its parent (position and velocity) through.
    probability : float in [0, 1]
        Probability of creating a particle instead of copying the parent.
    rng : random.Random, optional
        The generator owned by this propagator.
    v_init_limit : float >= 0 or array
        Maximum initial speed as a fraction of each range: one number, or one per parameter or per slot.

    Raises
    ------
    ValueError
        For a bad ``rank``, ``parents``, ``probability`` or ``v_init_limit``.
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        rank: int,
        parents: int = 0,
        probability: float = 1.0,
        rng: random.Random | None = None,
        v_init_limit: float | np.ndarray = 0.1,
    ) -> None:
        if parents not in (0, 1):
            raise ValueError(f"parents: InitUniformPSO takes 0 or 1 parent, got {parents!r}")
        super().__init__(parents, 1, probability, rng)
        self.space = SearchSpace.of(limits)
        self.rank = check_int("rank", rank, 0)
        self.v_init_limit = _per_slot("v_init_limit", v_init_limit, self.space)

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        if self.parents == 1 and len(inds) > 0 and self.rng.random() >= self.probability:
            return [inds[0].child()]
        position = self.space.sample(self.rng)
        v_max = self.v_init_limit * (self.space.upper - self.space.lower)
        velocity = np.array([self.rng.uniform(-m, m) for m in v_max])
        return [Individual(position, self.space, velocity=velocity, rank=self.rank)]

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        return 0 if self.parents == 0 else None

    def bind(self, island_rank: int) -> None:  # noqa: D102
        self.rank = island_rank


class BasicPSO(Propagator):
    """Particle swarm with inertia weight (Kennedy & Eberhart 1995; Shi & Eberhart 1998).

    ``v' = inertia v + c_cognitive r_1 * (p_best - x) + c_social r_2 * (g_best - x)``, ``x' = x + v'``, with
    ``r_1, r_2`` uniform in [0, 1) per dimension; out-of-bounds components are absorbed at the wall (see the
    module docstring). A particle without a velocity counts as at rest.

    Parameters
    ----------
    inertia : float
        The inertia weight ``w`` (commonly 0.729 with coefficients 1.49445).
    c_cognitive : float >= 0
        Acceleration towards the particle's personal best.
    c_social : float >= 0
        Acceleration towards the swarm's best.
    rank : int >= 0
        The worker whose particle is moved. Propulate 1.2.2 scripts pass the MPI world rank; the loop calls
        :meth:`bind` with the worker's island rank, which replaces it.
    limits : dict or SearchSpace
        The search space.
    rng : random.Random, optional
        The generator owned by this propagator.

    Raises
    ------
    ValueError
        For a non-finite coefficient, negative acceleration coefficients or a bad ``rank``.
    """

    def __init__(
        self,
        inertia: float,
        c_cognitive: float,
        c_social: float,
        rank: int,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(-1, 1, rng)
        self.inertia = check_real("inertia", inertia)
        self.c_cognitive = check_real("c_cognitive", c_cognitive, 0.0)
        self.c_social = check_real("c_social", c_social, 0.0)
        self.space = SearchSpace.of(limits)
        self.rank = check_int("rank", rank, 0)
        self.init = InitUniformPSO(self.space, self.rank, rng=self.rng)

    def bind(self, island_rank: int) -> None:  # noqa: D102
        self.rank = island_rank
        self.init.bind(island_rank)

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        own = [ind for ind in inds if ind.rank == self.rank]
        if not own:
            return self.init([])
        particle = max(own, key=lambda ind: ind.generation)
        p_best = min(own, key=loss_order)
        g_best = min(inds, key=loss_order)
        x = particle.position
        v = particle.velocity
        if v is None or v.shape != x.shape:
            v = np.zeros_like(x)
        v = np.where(np.isfinite(v), v, 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            new_v = self._velocity(x, v, p_best.position, g_best.position)
        return [self._move(x, new_v)]

    def _random(self) -> np.ndarray:
        """Uniform coefficients in [0, 1), one per slot, from the owned generator."""
        return np.array([self.rng.random() for _ in range(self.space.ndim)])

    def _velocity(self, x: np.ndarray, v: np.ndarray, p_best: np.ndarray, g_best: np.ndarray) -> np.ndarray:
        # Shi & Eberhart 1998, eq. (1) with per-dimension random coefficients.
        return (
            self.inertia * v
            + self.c_cognitive * self._random() * (p_best - x)
            + self.c_social * self._random() * (g_best - x)
        )

    def _move(self, x: np.ndarray, v: np.ndarray) -> Individual:
        """Return the particle at ``x + v``, with out-of-bounds components absorbed at the walls."""
        lower, upper = self.space.lower, self.space.upper
        with np.errstate(over="ignore", invalid="ignore"):
            new_x = x + v
        outside = ~((new_x >= lower) & (new_x <= upper))  # NaN counts as outside
        # A NaN component (inf - inf) goes to the wall its velocity pointed at, else the lower one.
        new_x = np.where(np.isnan(new_x), np.where(v > 0, upper, lower), new_x)
        new_x = np.clip(new_x, lower, upper)
        new_v = np.where(outside, 0.0, v)
        return Individual(new_x, self.space, velocity=new_v, rank=self.rank)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(inertia={self.inertia}, c_cognitive={self.c_cognitive}, "
            f"c_social={self.c_social}, rank={self.rank})"
        )


class VelocityClampingPSO(BasicPSO):
    """:class:`BasicPSO` with velocity clamping (Eberhart & Shi 2000).

    After the update, component ``i`` of the velocity is clipped to ``±v_limits_i * (upper_i - lower_i)``.

    Parameters
    ----------
    inertia, c_cognitive, c_social, rank, limits, rng
        As for :class:`BasicPSO`.
    v_limits : float >= 0 or array
        Maximum speed as a fraction of each range: one number, or one per parameter or per slot.

    Raises
    ------
    ValueError
        As for :class:`BasicPSO`, and for negative or non-finite ``v_limits``.
    """

    def __init__(
        self,
        inertia: float,
        c_cognitive: float,
        c_social: float,
        rank: int,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
        v_limits: float | np.ndarray = 0.6,
    ) -> None:
        super().__init__(inertia, c_cognitive, c_social, rank, limits, rng)
        self.v_limits = _per_slot("v_limits", v_limits, self.space)
        self._v_max = self.v_limits * (self.space.upper - self.space.lower)

    def _velocity(self, x: np.ndarray, v: np.ndarray, p_best: np.ndarray, g_best: np.ndarray) -> np.ndarray:
        return np.clip(super()._velocity(x, v, p_best, g_best), -self._v_max, self._v_max)


class ConstrictionPSO(BasicPSO):
    """Particle swarm with Clerc and Kennedy's constriction coefficient (2002).

    ``v' = chi (v + c_cognitive r_1 * (p_best - x) + c_social r_2 * (g_best - x))`` with
    ``chi = 2 / |2 - phi - sqrt(phi^2 - 4 phi)|``, ``phi = c_cognitive + c_social > 4``; see
    :func:`constriction_coefficient`. The ``inertia`` attribute holds ``chi``.

    Parameters
    ----------
    c_cognitive, c_social : float >= 0
        Acceleration coefficients with ``c_cognitive + c_social > 4`` (commonly 2.05 each, chi ≈ 0.7298).
    rank, limits, rng
        As for :class:`BasicPSO`.

    Raises
    ------
    ValueError
        If ``c_cognitive + c_social <= 4``, and as for :class:`BasicPSO`.
    """

    def __init__(
        self,
        c_cognitive: float,
        c_social: float,
        rank: int,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
    ) -> None:
        c_cognitive = check_real("c_cognitive", c_cognitive, 0.0)
        c_social = check_real("c_social", c_social, 0.0)
        chi = constriction_coefficient(c_cognitive, c_social)
        super().__init__(chi, c_cognitive, c_social, rank, limits, rng)

    def _velocity(self, x: np.ndarray, v: np.ndarray, p_best: np.ndarray, g_best: np.ndarray) -> np.ndarray:
        # Clerc & Kennedy 2002, type 1'' constriction.
        return self.inertia * (
            v
            + self.c_cognitive * self._random() * (p_best - x)
            + self.c_social * self._random() * (g_best - x)
        )


class CanonicalPSO(ConstrictionPSO):
    """The canonical particle swarm (Poli, Kennedy & Blackwell 2007): constriction plus velocity clamping.

    As :class:`ConstrictionPSO`, with each velocity component clipped to the range of its dimension,
    ``|v_i| <= upper_i - lower_i``. The canonical parameters are ``c_cognitive = c_social = 2.05``
    (chi ≈ 0.7298).

    Parameters
    ----------
    c_cognitive, c_social, rank, limits, rng
        As for :class:`ConstrictionPSO`.
    """

    def _velocity(self, x: np.ndarray, v: np.ndarray, p_best: np.ndarray, g_best: np.ndarray) -> np.ndarray:
        v_max = self.space.upper - self.space.lower
        return np.clip(super()._velocity(x, v, p_best, g_best), -v_max, v_max)


class StatelessPSO(BasicPSO):
    """Particle swarm without velocity memory.

    ``x' = x + c_cognitive r_1 * (p_best - x) + c_social r_2 * (g_best - x)``: the step does not depend on
    the previous one, so the stored velocity (the step taken) is never read back and ``inertia`` has no
    effect; it is accepted for a uniform signature. Propulate 1.2.2's order
    ``StatelessPSO(c_cognitive, c_social, rank, limits, rng)`` is accepted too (recognized by ``limits`` in
    fourth place).

    Parameters
    ----------
    inertia, c_cognitive, c_social, rank, limits, rng
        As for :class:`BasicPSO`.
    """

    def __init__(
        self,
        inertia: float,
        c_cognitive: float,
        c_social: float,
        rank: Any,
        limits: Any = None,
        rng: random.Random | None = None,
    ) -> None:
        if isinstance(rank, (Mapping, SearchSpace)):
            # Propulate 1.2.2 order: (c_cognitive, c_social, rank, limits, rng).
            inertia, c_cognitive, c_social, rank, limits, rng = (
                0.0,
                inertia,
                c_cognitive,
                c_social,
                rank,
                limits,
            )
        super().__init__(inertia, c_cognitive, c_social, rank, limits, rng)

    def _velocity(self, x: np.ndarray, v: np.ndarray, p_best: np.ndarray, g_best: np.ndarray) -> np.ndarray:
        return self.c_cognitive * self._random() * (p_best - x) + self.c_social * self._random() * (
            g_best - x
        )
