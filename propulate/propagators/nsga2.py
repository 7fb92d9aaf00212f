"""NSGA-II for several objectives, asynchronous and steady-state.

The selection is that of NSGA-II (Deb, Pratap, Agarwal & Meyarivan, "A fast and elitist multiobjective genetic
algorithm: NSGA-II", IEEE TEC 6(2), 2002): individuals are ranked by non-dominated sorting, ties within a
front broken by the crowding distance (larger first, Sec. III-B), and parents are drawn by binary tournament
on that order (Sec. III-C). The generational ``(mu + mu)`` replacement becomes the steady-state form of
asynchronous evolutionary algorithms, where evaluations end one at a time (Scott & De Jong, "Understanding
simple asynchronous evolutionary algorithms", FOGA 2015; for NSGA-II, Durillo, Nebro, Luna & Alba, "On the
effect of the steady-state selection scheme in multi-objective genetic algorithms", EMO 2009): every evaluated
individual joins the population, and before each breeding NSGA-II's environmental selection keeps the best
``pop_size`` of the population and the ``lambda`` individuals that arrived since the last breeding (about one
per worker of the island): a ``(mu + lambda)`` step with ``lambda`` set by the asynchrony, ``(mu + 1)`` with
one worker. A breeding therefore costs the same whatever the length of the run: it sorts ``pop_size + lambda``
points (``moocore``, O(n log n) for two and three objectives) and an arrival costs O(1).

The variation is Deb's for real-coded NSGA-II: simulated binary crossover (SBX, Deb & Agrawal, Complex
Systems 9, 1995; the bounded form of Deb & Goyal 1996) with distribution index ``eta_crossover`` and
probability ``crossover_prob``, each variable exchanged with probability 1/2, followed by polynomial
mutation (Deb & Goyal, Computer Science and Informatics 26(4), 1996; the bounded form of Deb & Deb 2014)
of each numeric parameter with probability ``mutation_prob`` (default ``1 / number of parameters``) and
distribution index ``eta_mutation``. They act on a parameter's slot of the search space's embedding, so
log scales are searched in log space and integers are rounded when read; a categorical parameter is
taken from either parent with probability 1/2 and redrawn uniformly with probability ``mutation_prob``.

Distribution indices. Deb et al. (2002) used ``eta = 20`` for both operators over 25,000 evaluations;
hyperparameter searches have hundreds to thousands, where wider steps pay. Measured at 2,000 evaluations (one
worker, 10 seeds, median hypervolume for ``eta`` = 20 / 10 / 5): ZDT1 0.37 / 0.54 / 0.64, ZDT2 0 / 0 / 0.11
(runs reaching the reference box 0 / 3 / 7 of 10), ZDT3 0.71 / 0.88 / 1.01, DTLZ7 0.35 / 1.05 / 1.35, whose
optima lie on the bounds of the box, and DTLZ2 0.689 / 0.687 / 0.662, DTLZ2 with its optimum moved to
0.25 0.693 / 0.691 / 0.662 and Fonseca-Fleming 0.447 / 0.423 / 0.404, whose optima lie inside it. The
default, 10, takes most of the gain where optima lie on bounds (as the smallest models of an accuracy-size
front often do) for a loss of at most 6 % where they lie inside. ZDT1-3 and DTLZ2 are the problems of
``benchmarks/multi_objective.py``; DTLZ7, the moved DTLZ2 and Fonseca-Fleming were held out of it.

Other workers and islands. The population is built from what the worker's island evaluates (every
evaluation the loop hands :meth:`NSGA2.observe`, its own and its peers', in the order they arrive) and from
immigrants; failed and pruned evaluations never enter it, and an individual that emigrated (inactive) is
dropped at the next breeding. Workers of one island therefore breed from almost the same population, each
with its own random stream; until ``pop_size`` individuals are known they sample the search space
uniformly, as NSGA-II's random first generation. The population is not checkpointed: on resume it is
rebuilt from the restored individuals the loop hands :meth:`NSGA2.observe`.

Many objectives. The crowding distance spreads a front well for two and three objectives (DTLZ2 with three
objectives in ``benchmarks/multi_objective.py``); from about four objectives most individuals are mutually
non-dominated and it loses its grip, which NSGA-III's reference directions address (Deb & Jain, IEEE TEC
18(4), 2014). Hyperparameter searches rarely weigh more than three objectives, so this propagator stays
with NSGA-II's crowding.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..individual import Individual, Status
from ..objectives import loss_vector
from ..space import Kind, SearchSpace
from ..validation import check_int, check_probability, check_real
from .base import Propagator, nsga2_order

__all__ = ["NSGA2"]


def _positive(name: str, value: object) -> float:
    number = check_real(name, value)
    if not number > 0:
        raise ValueError(f"{name}: expected a positive number, got {value!r}")
    return number


class NSGA2(Propagator):
    """Asynchronous steady-state NSGA-II: non-dominated sorting, crowding, SBX and polynomial mutation.

    See the module docstring for the algorithm and its sources. Use it with ``objectives`` set on
    :class:`~propulate.Propulator` or :class:`~propulate.Islands`; with one objective it is a steady-state
    genetic algorithm with binary tournaments on the loss.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space.
    pop_size : int >= 2
        The number of individuals kept for breeding (NSGA-II's ``N``), and how many are drawn uniformly
        before breeding starts. Default 50, as Optuna's ``NSGAIISampler`` (Deb et al. 2002 used 100 for
        25,000 evaluations; hyperparameter searches have hundreds to thousands).
    crossover_prob : float in [0, 1]
        Probability that two parents are recombined by SBX (0.9 in Deb et al. 2002); otherwise the child is a
        copy of the first parent before mutation.
    mutation_prob : float in [0, 1], optional
        Probability that a parameter is mutated; default ``1 / number of parameters`` (Deb et al. 2002).
    eta_crossover : float > 0
        SBX's distribution index: larger keeps children closer to their parents. Default 10 (Deb et al.
        2002 used 20; see "Distribution indices" in the module docstring).
    eta_mutation : float > 0
        The polynomial mutation's distribution index, default 10 (20 in Deb et al. 2002).
    rng : random.Random, optional
        The generator owned by this propagator; seed it differently on every worker.

    Raises
    ------
    ValueError
        For out-of-range arguments, named in the message.
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        pop_size: int = 50,
        crossover_prob: float = 0.9,
        mutation_prob: float | None = None,
        eta_crossover: float = 10.0,
        eta_mutation: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(0, 1, rng)
        self.space = SearchSpace.of(limits)
        self.pop_size = check_int("pop_size", pop_size, 2)
        self.crossover_prob = check_probability("crossover_prob", crossover_prob)
        count = len(self.space.parameters)
        self.mutation_prob = (
            1.0 / count if mutation_prob is None else check_probability("mutation_prob", mutation_prob)
        )
        self.eta_crossover = _positive("eta_crossover", eta_crossover)
        self.eta_mutation = _positive("eta_mutation", eta_mutation)
        numeric = [p for p in self.space.parameters if p.kind is not Kind.CATEGORICAL]
        self._slots = np.array([p.offset for p in numeric], dtype=np.intp)  # their slots in the embedding
        self._lower = np.array([p.lower for p in numeric])
        self._upper = np.array([p.upper for p in numeric])
        self._categorical = [p for p in self.space.parameters if p.kind is Kind.CATEGORICAL]
        self._members: list[Individual] = []  # the population, at most pop_size
        self._order: np.ndarray | None = None  # ranks of the members for the tournaments, computed lazily
        self.observed = 0  # completed individuals that entered the population, ever

    # ------------------------------------------------------------------------------------ population

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        return 0  # it breeds from what it observed

    def observe(self, ind: Individual) -> None:
        """Let a completed individual with finite losses join the population (selected before breeding)."""
        if ind.status is not Status.COMPLETED:
            return
        losses = loss_vector(ind)
        if not all(math.isfinite(v) for v in losses):
            return
        self.observed += 1
        self._members.append(ind)
        self._order = None
        if len(self._members) > 2 * self.pop_size:  # many arrivals during one long evaluation
            self._select()

    def _select(self) -> np.ndarray:
        """Keep the best ``pop_size`` members in NSGA-II's order; return each one's place in that order.

        NSGA-II's environmental selection over the population and everything that arrived since the last
        breeding (Deb et al. 2002, Sec. III-C): whole fronts by Pareto rank, the last one cut by crowding
        distance computed over the merged set. The survivors keep their places for the tournaments.
        Members that emigrated (inactive) leave first.
        """
        if any(not ind.active for ind in self._members):
            self._members = [ind for ind in self._members if ind.active]
            self._order = None
        if self._order is None:
            order = nsga2_order(self._members)
            place = np.empty(len(order), dtype=np.int64)
            place[order] = np.arange(len(order))
            if len(order) > self.pop_size:
                keep = np.sort(order[: self.pop_size])  # in the order they arrived
                self._members = [self._members[i] for i in keep]
                place = place[keep]
            self._order = place
        return self._order

    @property
    def population(self) -> list[Individual]:
        """The individuals kept for breeding, at most ``pop_size`` (the members themselves, do not modify)."""
        self._select()
        return list(self._members)

    # -------------------------------------------------------------------------------------- breeding

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Breed one child from the population (``inds`` is ignored: see :attr:`breeding_pool`)."""
        self._select()
        if self.observed < self.pop_size or len(self._members) < 2:  # NSGA-II's random first generation
            return [Individual(self.space.sample(self.rng), self.space)]
        first, second = self._tournament(), self._tournament()
        child = first.child()
        x1, x2 = child.position, second.position
        if self.rng.random() < self.crossover_prob:
            self._sbx(x1, x2)
            for p in self._categorical:
                if self.rng.random() < 0.5:
                    x1[p.offset : p.offset + p.width] = x2[p.offset : p.offset + p.width]
        self._mutate(child)
        return [child]

    def _tournament(self) -> Individual:
        """Return the better in NSGA-II's order of two members drawn uniformly (binary tournament)."""
        order = self._select()
        i, j = self.rng.randrange(len(self._members)), self.rng.randrange(len(self._members))
        return self._members[i if order[i] <= order[j] else j]

    def _draws(self, count: int) -> np.ndarray:
        """Return ``count`` uniform numbers in [0, 1) from this propagator's generator."""
        draw = self.rng.random
        return np.array([draw() for _ in range(count)])

    def _sbx(self, x1: np.ndarray, x2: np.ndarray) -> None:
        """Recombine the numeric slots by bounded SBX; ``x1`` becomes one of the two children, in place.

        Each slot is recombined with probability 1/2 (when the parents differ there); of the two children
        SBX makes of a slot, ``x1`` takes either with probability 1/2.
        """
        slots, low, high = self._slots, self._lower, self._upper
        exchange, u, pick = self._draws(3 * len(slots)).reshape(3, len(slots))
        a, b = x1[slots], x2[slots]
        y1, y2 = np.minimum(a, b), np.maximum(a, b)
        use = (exchange < 0.5) & (y2 - y1 > 1e-14) & (high > low)
        if not use.any():
            return
        y1, y2, u, low, high = y1[use], y2[use], u[use], low[use], high[use]
        diff = y2 - y1
        power = 1.0 / (self.eta_crossover + 1.0)

        def spread(to_bound: np.ndarray) -> np.ndarray:  # beta_q of the bounded SBX (Deb & Goyal 1996)
            alpha = 2.0 - (1.0 + 2.0 * to_bound / diff) ** -(self.eta_crossover + 1.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(u <= 1.0 / alpha, (u * alpha) ** power, (1.0 / (2.0 - u * alpha)) ** power)

        c1 = np.clip(0.5 * ((y1 + y2) - spread(y1 - low) * diff), low, high)
        c2 = np.clip(0.5 * ((y1 + y2) + spread(high - y2) * diff), low, high)
        x1[slots[use]] = np.where(pick[use] < 0.5, c1, c2)

    def _mutate(self, child: Individual) -> None:
        """Mutate each numeric slot polynomially, redraw each categorical, each with ``mutation_prob``."""
        x = child.position
        slots, low, high = self._slots, self._lower, self._upper
        mutate, u = self._draws(2 * len(slots)).reshape(2, len(slots))
        use = (mutate < self.mutation_prob) & (high > low)
        if use.any():
            y, u, low, high = x[slots[use]], u[use], low[use], high[use]
            width = high - low
            power = 1.0 / (self.eta_mutation + 1.0)
            below = (
                2.0 * u + (1.0 - 2.0 * u) * (1.0 - (y - low) / width) ** (self.eta_mutation + 1.0)
            ) ** power
            above = 2.0 * (1.0 - u) + 2.0 * (u - 0.5) * (1.0 - (high - y) / width) ** (
                self.eta_mutation + 1.0
            )
            delta = np.where(u < 0.5, below - 1.0, 1.0 - above**power)
            x[slots[use]] = np.clip(y + delta * width, low, high)
        for p in self._categorical:
            if self.rng.random() < self.mutation_prob:
                self.space.encode_one(x, p, SearchSpace.sample_value(p, self.rng))

    def reject(self, ind: Individual) -> None:  # noqa: D102
        pass  # the next call draws other parents and other variations

    def __repr__(self) -> str:
        return (
            f"NSGA2(pop_size={self.pop_size}, crossover_prob={self.crossover_prob}, "
            f"mutation_prob={self.mutation_prob:.4g}, eta_crossover={self.eta_crossover}, "
            f"eta_mutation={self.eta_mutation})"
        )
