"""Particle swarm optimization (PSO) as asynchronous propagators.

Every worker of an island moves one particle. The particle of a worker is its latest individual (highest
generation among those it bred itself, see below), its personal best ``p_best`` is its best individual, and
the swarm best ``g_best`` is the best of the individuals given and ``p_best``. One breeding is one move::

    v' = w v + c_cognitive r_1 * (p_best - x) + c_social r_2 * (g_best - x)
    x' = x + v'

with ``r_1, r_2`` drawn uniformly from [0, 1) per dimension (Kennedy & Eberhart 1995; inertia weight ``w``:
Shi & Eberhart 1998). The move happens in the numeric embedding ``Individual.position``; a categorical
parameter is a block of one-hot slots in [0, 1] whose argmax is the category, a log-scale parameter
(:class:`propulate.Float` or ``Integer`` with ``log=True``) moves in ``ln(value)``, and integers and
stepped ranges are read back on their nearest value.

Boundary rule ("absorbing walls", Robinson & Rahmat-Samii 2004): a component of ``x'`` outside
``[lower, upper]`` (or not finite, after an overflow) is set to the violated bound and the same component of
``v'`` to zero, so offspring always stay inside the limits and the stored velocity is the one really used.

A worker without a particle (at the start, or when the particles it bred all failed) initializes one
uniformly, as :class:`InitUniformPSO` does.

Individuals from other workers and islands. The individuals the worker bred itself, on this island (``rank``
equal to its island rank, ``migration_steps`` 0), are its particle's history: the latest one is the
particle, the best one ``p_best``. The worker learns them as they are evaluated (:meth:`BasicPSO.observe`,
O(1)) and keeps them when they leave the island's active individuals: the default emigrant is the worker's
best individual, often its particle, and a particle that fell back to an older position would repeat the
move that led to the emigrant. Every other individual, bred by another worker of the island or arrived from
another island, is only a candidate for ``g_best``, the best of the individuals the loop passes (the best
active one: :attr:`BasicPSO.breeding_pool` is 1) and of ``p_best``; so good immigrants attract the swarm.
An immigrant is never adopted as the worker's particle, although it keeps the ``rank`` and ``generation``
it was bred with on its own island. The particle a call moved is :attr:`BasicPSO.particle`. Called directly
with a list of individuals, as in Propulate 1.2.2, a propagator also finds its particle and ``p_best`` in
the list.

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

import inspect
import math
import numbers
import random
from collections.abc import Mapping
from typing import Any, overload

import numpy as np

from ..individual import Individual, Status, loss_order
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


# The evaluated individuals with a usable loss, as in the loop's breeding pool.
_USABLE = (Status.COMPLETED, Status.PRUNED)


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

    def bind(self, island_rank: int, island_size: int = 1) -> None:  # noqa: D102
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

    Attributes
    ----------
    particle : Individual or None
        The individual the last call moved: the latest one this worker bred on its island, never an
        individual of another worker or island (see the module docstring). ``None`` before the first call
        and after a call that initialized a new particle.

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
        self.particle: Individual | None = None
        # This worker's latest and best evaluated particles, as observed: they stay when they emigrate.
        self._latest: Individual | None = None
        self._best: Individual | None = None

    @property
    def breeding_pool(self) -> int:
        """1: the particle and ``p_best`` arrive through :meth:`observe`; the loop passes ``g_best``."""
        return 1

    def bind(self, island_rank: int, island_size: int = 1) -> None:  # noqa: D102
        if island_rank != self.rank:
            self._latest = self._best = None  # the particles of another worker
        self.rank = island_rank
        self.init.bind(island_rank, island_size)

    def _is_own(self, ind: Individual) -> bool:
        """Whether this worker bred ``ind`` on its island (immigrants keep the rank they were bred with)."""
        return ind.rank == self.rank and ind.migration_steps == 0

    def observe(self, ind: Individual) -> None:
        """Remember the worker's own particle and personal best as they are evaluated; O(1).

        Failed and not evaluated individuals are left out, as the loop leaves them out of the breeding pool.
        An individual of another worker or island is ignored here (it can still be ``g_best``).
        """
        if not self._is_own(ind) or ind.status not in _USABLE:
            return
        if self._latest is None or ind.generation > self._latest.generation:
            self._latest = ind
        if self._best is None or loss_order(ind) < loss_order(self._best):
            self._best = ind

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        own = [ind for ind in inds if self._is_own(ind)]
        own += [ind for ind in (self._latest, self._best) if ind is not None]
        if not own:
            self.particle = None
            return self.init([])
        particle = max(own, key=lambda ind: ind.generation)
        self.particle = particle
        # Of equal losses (positions a few ulps apart, late in a run) the earliest, as observe() keeps it.
        p_best = min(own, key=lambda ind: (loss_order(ind), ind.generation))
        g_best = min([*inds, p_best], key=loss_order)  # the swarm's best includes every personal best
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


#: The calls :class:`StatelessPSO` accepts: Propulate 1.2.2's, which is :class:`BasicPSO`'s without
#: ``inertia``, and :class:`BasicPSO`'s own.
_INERTIA_FIRST = inspect.signature(BasicPSO)
_STATELESS_ORDERS = (
    _INERTIA_FIRST.replace(parameters=[p for p in _INERTIA_FIRST.parameters.values() if p.name != "inertia"]),
    _INERTIA_FIRST,
)


class StatelessPSO(BasicPSO):
    """Particle swarm without velocity memory.

    ``x' = x + c_cognitive r_1 * (p_best - x) + c_social r_2 * (g_best - x)``: the step does not depend on
    the previous one, so the stored velocity (the step taken) is never read back. Particles, bests and
    individuals from other workers and islands as in :class:`BasicPSO`.

    Called as in Propulate 1.2.2, ``StatelessPSO(c_cognitive, c_social, rank, limits, rng)``, by position or
    by keyword; or as :class:`BasicPSO`, ``StatelessPSO(inertia, c_cognitive, c_social, rank, limits, rng)``,
    with an ``inertia`` that has no effect. The order is recognized by where the search space is.

    Parameters
    ----------
    c_cognitive, c_social, rank, limits
        As for :class:`BasicPSO`.
    rng : random.Random, optional
        As for :class:`BasicPSO` (required in Propulate 1.2.2).
    inertia : float, optional
        Accepted, and ignored, for the signature of :class:`BasicPSO`; 0 when not given.

    Raises
    ------
    TypeError
        If the arguments fit neither order.
    ValueError
        As for :class:`BasicPSO`.
    """

    @overload
    def __init__(
        self,
        c_cognitive: float,
        c_social: float,
        rank: int,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        inertia: float,
        c_cognitive: float,
        c_social: float,
        rank: int,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
    ) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for order in _STATELESS_ORDERS:
            try:
                bound = order.bind(*args, **kwargs)
            except TypeError:
                continue
            if isinstance(bound.arguments["limits"], (Mapping, SearchSpace)):
                break
        else:
            raise TypeError(
                "StatelessPSO: expected (c_cognitive, c_social, rank, limits, rng=None) as in Propulate "
                "1.2.2, or (inertia, c_cognitive, c_social, rank, limits, rng=None), by position or keyword; "
                f"got {len(args)} positional argument(s) and the keywords {sorted(kwargs)}"
            )
        bound.apply_defaults()
        arguments = bound.arguments
        super().__init__(
            arguments.get("inertia", 0.0),
            arguments["c_cognitive"],
            arguments["c_social"],
            arguments["rank"],
            arguments["limits"],
            arguments["rng"],
        )

    def _velocity(self, x: np.ndarray, v: np.ndarray, p_best: np.ndarray, g_best: np.ndarray) -> np.ndarray:
        return self.c_cognitive * self._random() * (p_best - x) + self.c_social * self._random() * (
            g_best - x
        )
