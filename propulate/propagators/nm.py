r"""Parallel, asynchronous Nelder–Mead simplex search.

The serial method
-----------------
Nelder & Mead (1965) with the coefficients and decisions of Lagarias et al. (1998). For a simplex
:math:`x_0, \dots, x_n` sorted best first (lowest loss) and the centroid :math:`c` of all vertices but the
worst, :math:`x_n`:

.. math::

    x_r &= c + \alpha (c - x_n)            && \text{reflection} \\
    x_e &= c + \gamma (x_r - c)            && \text{expansion} \\
    x_c &= c + \rho (x_r - c)              && \text{outside contraction} \\
    x_{cc} &= c - \rho (c - x_n)           && \text{inside contraction} \\
    x_i &\leftarrow x_0 + \sigma (x_i - x_0),\ i = 1, \dots, n   && \text{shrink towards the best vertex}

An iteration evaluates :math:`x_r`. If :math:`f_r < f_0` it evaluates :math:`x_e` and keeps the better of the
two; if :math:`f_r < f_{n-1}` it keeps :math:`x_r`; if :math:`f_r < f_n` it evaluates :math:`x_c` and keeps it
if :math:`f_c \le f_r`; otherwise it evaluates :math:`x_{cc}` and keeps it if :math:`f_{cc} < f_n`. An
iteration that keeps nothing shrinks the simplex and evaluates the :math:`n` new vertices. A simplex that has
lost a direction (its spread along one parameter below :attr:`ParallelNelderMead.FLAT` times its largest
spread, which Nelder–Mead cannot undo) is rebuilt around its best vertex (:meth:`ParallelNelderMead.restart`).

Parallel and asynchronous evaluation
------------------------------------
Every worker holds a replica of this serial method (:class:`SimplexState`) and advances it with the losses
it has learned, through every point whose loss is known, up to the first point the method needs that nobody
has evaluated yet. The trajectory is a function of the losses alone, so all replicas agree, and the search
does not depend on the number of workers or on their timing; a resumed run continues it. The workers only
decide together which points to evaluate early:

- A worker lists the points the method may ask for next, likeliest first, by following the possible outcomes
  of the unknown losses (:meth:`ParallelNelderMead.speculate`, weighted by
  :attr:`ParallelNelderMead.OUTCOMES`): the needed point; if the reflection is kept, the next reflection; the
  inside contraction; the expansion; and so on. All points of an initial simplex or a shrink are needed.
- The worker with island rank :math:`r` evaluates entry :math:`r` of its list. Worker 0 thus always
  evaluates the needed point, so the method makes at least one step per generation of worker 0; the other
  workers evaluate points it will likely need next, and when one of them was right, the method makes several
  steps at once.
- When the loop discards a proposal as a duplicate (:meth:`ParallelNelderMead.reject`: a peer evaluates that
  point already, or its loss is known), the worker takes the next entry of its list that was not discarded.

With 4 workers in step, about two serial steps are made per round of evaluations; when the workers run out
of step (cheap losses, oversubscribed cores), others' guesses arrive after worker 0 has evaluated the point
itself, and the gain shrinks towards one step per round (``tests/mpi/test_nm.py`` has measured figures).
This is speculative execution of the serial method. The classic alternative, Lee & Wiswall's (2007)
simultaneous moves of the :math:`p` worst vertices, has a trajectory that depends on :math:`p` and timing;
in the measurements behind this module (10-D sphere and Rosenbrock, in step) it gained little over the
serial method, and asynchronous arrivals, each a candidate for a different simplex, made it degenerate.

Individuals from other workers and islands
------------------------------------------
A replica learns losses from :meth:`ParallelNelderMead.observe`, which the loop calls once for every
individual that enters the worker's population, in O(1): the worker's own evaluations, its island peers'
and immigrants alike. It remembers each point's loss for good (the lowest, if a point was evaluated twice):

- An individual that leaves the population of active individuals, by migration (the default emigrant is the
  worker's best, often the newest vertex) or replaced by a pollinator, keeps its loss in every replica; which
  individuals are active plays no part in the method.
- A failed evaluation (:attr:`propulate.individual.Status.FAILED`) counts as infinitely bad, on every worker
  that observes it, so no replica waits for a point that nobody will evaluate again. A pruned one (stopped
  early by a surrogate) counts with its last interim loss. Failure is read from the status alone: an
  individual that is missing from the individuals passed to a call is not taken for a failure.
- An immigrant is a point of the same function: if it lies on this island's trajectory (islands that start
  from the same point follow the same one), its loss saves an evaluation; otherwise it plays no part.
  Immigrants and individuals bred on the island by another worker never serve as the start point.

All workers of an island observe the same individuals, so their replicas agree once the same messages have
arrived. The loop passes no individuals to a call (:attr:`ParallelNelderMead.breeding_pool` is 0), so a
breeding costs the same however long the run. Called directly with a list of individuals, as in Propulate
1.2.2, the propagator learns from the list too: the individuals after the last one it has seen.

Initial simplex: the points ``start`` and ``start + h_i e_i`` with ``h = scale * (upper - lower)`` (see
:meth:`ParallelNelderMead.design`). Without ``start``, the first point worker 0 of the island evaluates,
drawn uniformly from its generator, is the start; until it is known, the other workers evaluate uniform
random points too.

Boundary rule: a step from a base point :math:`b` inside the box (the centroid) towards :math:`t` is
shortened to :math:`b + \lambda (t - b)` with the largest :math:`\lambda \le 1` that stays inside the limits
(:func:`step_inside`). Contractions and shrinks are convex combinations of points in the box and need no
rule. Unlike clipping, this keeps the point on the line of the move and the simplex non-degenerate.

Checkpoints: a worker's state is its replica (:meth:`ParallelNelderMead.state_dict`). A replica restored from
a slightly older snapshot catches up from the population; without a saved state (a resume onto another
layout) a worker replays the trajectory from the start.

References
----------
J. A. Nelder and R. Mead, "A simplex method for function minimization", The Computer Journal 7(4), 1965.
J. C. Lagarias, J. A. Reeds, M. H. Wright and P. E. Wright, "Convergence properties of the Nelder–Mead simplex
method in low dimensions", SIAM J. Optim. 9(1), 1998.
D. Lee and M. Wiswall, "A parallel implementation of the simplex function minimization routine",
Computational Economics 30(2), 2007.
F. Gao and L. Han, "Implementing the Nelder–Mead simplex algorithm with adaptive parameters", Computational
Optimization and Applications 51(1), 2012.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any, ClassVar

import numpy as np

from ..individual import Individual, Status, loss_order
from ..space import Kind, SearchSpace
from ..validation import check_real
from .base import Propagator

__all__ = [
    "ParallelNelderMead",
    "SimplexState",
    "Stage",
    "centroid",
    "contract_inside",
    "contract_outside",
    "expand",
    "reflect",
    "shrink",
    "step_inside",
]


def centroid(simplex: np.ndarray) -> np.ndarray:
    """Return the centroid of all vertices of ``simplex`` (shape ``(n + 1, n)``, best first) but the last.

    Each coordinate is an exactly rounded sum (:func:`math.fsum`): it does not depend on the order of the
    vertices or on the machine, so every worker computes the same point for the same vertices.
    """
    return np.array([math.fsum(column) for column in simplex[:-1].T]) / (len(simplex) - 1)


def reflect(c: np.ndarray, x: np.ndarray, alpha: float) -> np.ndarray:
    r"""Reflect vertex ``x`` through centroid ``c``: :math:`x_r = c + \alpha (c - x)` (Lagarias eq. 2.3)."""
    return c + alpha * (c - x)


def expand(c: np.ndarray, x_r: np.ndarray, gamma: float) -> np.ndarray:
    r"""Expansion :math:`x_e = c + \gamma (x_r - c)` beyond the reflection point (Lagarias eq. 2.4)."""
    return c + gamma * (x_r - c)


def contract_outside(c: np.ndarray, x_r: np.ndarray, rho: float) -> np.ndarray:
    r"""Contract outside: :math:`x_c = c + \rho (x_r - c)`, between centroid and reflection (eq. 2.5)."""
    return c + rho * (x_r - c)


def contract_inside(c: np.ndarray, x: np.ndarray, rho: float) -> np.ndarray:
    r"""Inside contraction :math:`x_{cc} = c - \rho (c - x)`, between centroid and worst vertex (eq. 2.6)."""
    return c - rho * (c - x)


def shrink(simplex: np.ndarray, sigma: float) -> np.ndarray:
    r"""Shrink towards the best vertex: :math:`x_i = x_0 + \sigma (x_i - x_0)` (Lagarias eq. 2.7).

    Parameters
    ----------
    simplex : numpy.ndarray
        Shape ``(n + 1, n)``, best vertex first.
    sigma : float in (0, 1)
        The shrink coefficient.

    Returns
    -------
    numpy.ndarray
        A new simplex of the same shape; row 0 is the unchanged best vertex.
    """
    return simplex[0] + sigma * (simplex - simplex[0])


def step_inside(base: np.ndarray, target: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Return ``target`` if it lies in ``[lower, upper]``, else the last point inside on the way there.

    That is ``base + lam * (target - base)`` with the largest ``lam`` in [0, 1] inside the box (clipped once
    more against rounding). ``base`` must lie inside the box.
    """
    if np.all(target >= lower) and np.all(target <= upper):
        return target
    d = target - base
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(d > 0, (upper - base) / d, np.inf)
        down = np.where(d < 0, (lower - base) / d, np.inf)
    lam = float(min(1.0, up.min(initial=np.inf), down.min(initial=np.inf)))
    return np.clip(base + max(lam, 0.0) * d, lower, upper)


class Stage(IntEnum):
    """The step of the serial method whose point is asked for next."""

    #: Evaluating the initial simplex, one vertex after the other.
    DESIGN = 0
    #: The reflection point.
    REFLECT = 1
    #: The expansion point (the reflection beat the best vertex).
    EXPAND = 2
    #: The outside contraction point.
    CONTRACT_OUT = 3
    #: The inside contraction point.
    CONTRACT_IN = 4
    #: The shrunk vertices, one after the other.
    SHRINK = 5


@dataclasses.dataclass(frozen=True)
class SimplexState:
    """A state of the serial Nelder–Mead method: the simplex, the step it is at, the point it asks for.

    Built by :meth:`ParallelNelderMead.make_state`, which computes ``point``.

    Attributes
    ----------
    stage : Stage
        The step whose point is asked for next.
    vertices : numpy.ndarray
        Shape ``(n + 1, n)``; sorted best first except while evaluating (``DESIGN``, ``SHRINK``).
    losses : tuple of float
        Losses of ``vertices[:len(losses)]``: all of them, or those evaluated so far while evaluating.
    x_r : numpy.ndarray or None
        Shape ``(n,)``: the reflection point, in the stages after ``REFLECT``.
    f_r : float
        Its loss.
    step : int >= 0
        How many evaluations the method has used so far; ``point`` is evaluation number ``step``.
    restarts : int >= 0
        How often the simplex was rebuilt (see :meth:`ParallelNelderMead.restart`).
    anchor : float
        The best loss when it was last rebuilt (``inf`` before).
    point : numpy.ndarray
        Shape ``(n,)``: the point whose loss the method needs next, inside the limits.
    c : numpy.ndarray or None
        Shape ``(n,)``: the centroid of all vertices but the worst, in the stages of an iteration.
    """

    stage: Stage
    vertices: np.ndarray
    losses: tuple[float, ...]
    x_r: np.ndarray | None
    f_r: float
    step: int
    restarts: int
    anchor: float
    point: np.ndarray
    c: np.ndarray | None

    def to_plain(self) -> dict[str, Any]:
        """Return the state as plain Python values (for checkpoints); ``point`` is recomputed on load."""
        return {
            "stage": int(self.stage),
            "vertices": self.vertices.tolist(),
            "losses": list(self.losses),
            "x_r": None if self.x_r is None else self.x_r.tolist(),
            "f_r": self.f_r,
            "step": self.step,
            "restarts": self.restarts,
            "anchor": self.anchor,
        }


def _key(x: np.ndarray) -> bytes:
    # Adding 0.0 turns -0.0 into 0.0: one value, as the loop's test for known configurations has it.
    return np.ascontiguousarray(x + 0.0, dtype=np.float64).tobytes()


def _sorted(vertices: np.ndarray, losses: Sequence[float]) -> tuple[np.ndarray, tuple[float, ...]]:
    """Sort by loss, ties by position, so that every replica numbers equal vertices alike."""
    values = np.asarray(losses, dtype=np.float64)
    if len(set(losses)) == len(losses):
        order = np.argsort(values, kind="stable")
    else:
        order = np.lexsort((*vertices.T[::-1], values))
    return vertices[order], tuple(values[order].tolist())


def _replace_worst(state: SimplexState, x: np.ndarray, f: float) -> tuple[np.ndarray, tuple[float, ...]]:
    """Return the vertices and losses of ``state`` with the worst vertex replaced by ``x``, sorted."""
    vertices = state.vertices.copy()
    vertices[-1] = x
    return _sorted(vertices, (*state.losses[:-1], f))


class ParallelNelderMead(Propagator):
    r"""Asynchronous parallel Nelder–Mead: each worker evaluates a point the serial method will likely need.

    See the module docstring for the method, the parallel scheme, how individuals from other workers and
    islands are treated, the initial simplex and the boundary rule. Learns losses from :meth:`observe`,
    returns a list of one new individual inside the limits, and takes the next likely point after a
    :meth:`reject`. The loop tells it the worker's island rank with :meth:`bind`.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space; every parameter must be continuous: a ``(low, high)`` tuple of floats or a
        :class:`propulate.Float`. The simplex lives in the embedding: in ``ln(value)`` for a log scale; a
        stepped range is searched continuously and its vertices read back on the grid.
    rng : random.Random, optional
        The generator owned by this propagator. Used only without ``start``: for the uniform points evaluated
        until worker 0's first point, the start, is known.
    start : dict or array-like, optional
        The first vertex: parameter values as a dict, or as a sequence in the order of the limits (of
        shape ``(n,)``); inside the limits.
        Without it, the first point worker 0 evaluates, drawn uniformly from the box.
    alpha : float > 0
        Reflection coefficient :math:`\alpha` (Lagarias et al. 1998: 1).
    gamma : float > max(1, alpha)
        Expansion coefficient :math:`\gamma` (2).
    rho : float in (0, 1)
        Contraction coefficient :math:`\rho`, inside and outside (0.5).
    sigma : float in (0, 1)
        Shrink coefficient :math:`\sigma` (0.5).
    scale : float > 0
        Edge length of the initial simplex as a fraction of each parameter's range (shortened to the box).

    Raises
    ------
    ValueError
        If ``limits`` has an integer or categorical parameter (named in the message), a coefficient is out
        of its range, or ``start`` does not fit the search space.

    Notes
    -----
    Worker :math:`r` evaluates the :math:`r`-th likeliest point, so beyond a handful of workers per island
    the extra ones mostly evaluate unlikely points. For many parameters the adaptive coefficients of Gao &
    Han (2012), :math:`\alpha = 1`, :math:`\gamma = 1 + 2/n`, :math:`\rho = 3/4 - 1/(2n)`,
    :math:`\sigma = 1 - 1/n`, may work better; :meth:`adaptive` builds the propagator with them.
    """

    #: Rough frequencies of the outcomes of an unknown loss, to rank the points to evaluate early: of a
    #: reflection (kept, expansion, inside, outside contraction; the serial method on 10-D sphere and
    #: Rosenbrock: about 55 %, 20 %, 20 %, 5 %), of an expansion (better than the reflection or not) and of a
    #: contraction (kept, or a shrink follows).
    OUTCOMES: ClassVar[dict[Stage, tuple[float, ...]]] = {
        Stage.REFLECT: (0.55, 0.2, 0.2, 0.05),
        Stage.EXPAND: (0.5, 0.5),
        Stage.CONTRACT_OUT: (0.9, 0.1),
        Stage.CONTRACT_IN: (0.9, 0.1),
    }
    #: A simplex whose spread along a parameter is below this fraction of its largest spread is rebuilt.
    FLAT = 1e-3
    #: Most states of the serial method a worker explores to find its next point.
    MAX_EXPLORED = 64

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
        start: Mapping[str, float] | Sequence[float] | np.ndarray | None = None,
        alpha: float = 1.0,
        gamma: float = 2.0,
        rho: float = 0.5,
        sigma: float = 0.5,
        scale: float = 1.0,
    ) -> None:
        super().__init__(-1, 1, rng)
        self.space = SearchSpace.of(limits)
        for p in self.space.parameters:
            if p.kind is not Kind.FLOAT:
                raise ValueError(
                    f"limits[{p.name!r}]: ParallelNelderMead searches continuous parameters only (float "
                    f"ranges), got {p.bounds!r}"
                )
        coefficients = {"alpha": alpha, "gamma": gamma, "rho": rho, "sigma": sigma, "scale": scale}
        self.alpha, self.gamma, self.rho, self.sigma, self.scale = (
            check_real(name, value) for name, value in coefficients.items()
        )
        checks = {
            "alpha": (self.alpha > 0, "> 0"),
            "gamma": (self.gamma > 1 and self.gamma > self.alpha, "> 1 and > alpha"),
            "rho": (0 < self.rho < 1, "in (0, 1)"),
            "sigma": (0 < self.sigma < 1, "in (0, 1)"),
            "scale": (self.scale > 0, "> 0"),
        }
        for name, (ok, allowed) in checks.items():
            if not ok:
                raise ValueError(f"{name}: expected a number {allowed}, got {coefficients[name]!r}")
        self.n = self.space.ndim
        self.lower = np.asarray(self.space.lower, dtype=np.float64)
        self.upper = np.asarray(self.space.upper, dtype=np.float64)
        self.start = self._check_start(start)
        self.edge = self.scale * (self.upper - self.lower)
        self.island_rank = 0
        self._reset()

    @classmethod
    def adaptive(
        cls,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
        start: Mapping[str, float] | Sequence[float] | np.ndarray | None = None,
        scale: float = 1.0,
    ) -> ParallelNelderMead:
        """Build the propagator with the dimension-adaptive coefficients of Gao & Han (2012), eq. (4.1)."""
        n = SearchSpace.of(limits).ndim
        if n < 2:
            return cls(limits, rng, start, scale=scale)  # sigma = 1 - 1/n would be 0 for n = 1
        return cls(limits, rng, start, 1.0, 1.0 + 2.0 / n, 0.75 - 0.5 / n, 1.0 - 1.0 / n, scale)

    def _check_start(
        self, start: Mapping[str, float] | Sequence[float] | np.ndarray | None
    ) -> np.ndarray | None:
        if start is None:
            return None
        values = np.array(list(start.values()) if isinstance(start, Mapping) else start, dtype=np.float64)
        if values.shape != (self.n,) or not np.all(np.isfinite(values)):
            raise ValueError(f"start: expected {self.n} finite values, got {start!r}")
        try:
            given = start if isinstance(start, Mapping) else dict(zip(self.space.names, values, strict=True))
            x = self.space.encode(given)
        except ValueError as err:
            raise ValueError(f"start: {err}") from None
        if np.any(x < self.lower) or np.any(x > self.upper):
            raise ValueError(f"start: {start!r} lies outside the limits {self.space.limits}")
        return x

    def _reset(self) -> None:
        #: The replica of the serial method; None until its start point is known.
        self._state: SimplexState | None = None
        #: Losses of the points evaluated so far, by position (the lowest of repeated points; inf: failed).
        self._known: dict[bytes, float] = {}
        #: uids of the individuals already learned from.
        self._seen: set[int] = set()
        #: Without ``start``: the first point worker 0 of the island evaluated, and its (generation, island,
        #: uid), the order in which it is chosen.
        self._first: np.ndarray | None = None
        self._first_order: tuple[int, int, int] | None = None
        #: Proposals of the current breeding that the loop discarded as duplicates.
        self._rejected: set[bytes] = set()
        #: Whether the last event was a rejection: the next call then belongs to the same breeding.
        self._retrying = False

    @property
    def breeding_pool(self) -> int:
        """0: the loop passes no individuals; the losses arrive through :meth:`observe`."""
        return 0

    @property
    def replicated(self) -> bool:
        """True: every worker runs a copy of the island's simplex (see the module docstring)."""
        return True

    def bind(self, island_rank: int, island_size: int = 1) -> None:
        """Evaluate entry ``island_rank`` of the list of likely points (see the module docstring).

        Parameters
        ----------
        island_rank : int >= 0
            The worker's rank in its island.
        island_size : int >= 1
            The number of workers of the island (not used: each worker takes its own entry).
        """
        self.island_rank = int(island_rank)

    # --- the serial method ----------------------------------------------------------------------------------

    def design(self, center: np.ndarray, edge: np.ndarray | None = None) -> np.ndarray:
        """Return an initial simplex around ``center``, shape ``(n + 1, n)``, inside the limits.

        Vertex 0 is ``center``; vertex ``i + 1`` is ``center + h_i e_i`` with the edge lengths ``h``
        (default ``scale * (upper - lower)``), or ``center - h_i e_i`` if only that fits, else shortened to
        the farther bound.
        """
        edge = self.edge if edge is None else edge
        vertices = [center.copy()]
        for i in range(self.n):
            step = np.zeros(self.n)
            step[i] = edge[i]
            if center[i] + step[i] > self.upper[i]:
                if center[i] - step[i] >= self.lower[i]:
                    step[i] = -step[i]
                elif self.upper[i] - center[i] < center[i] - self.lower[i]:
                    step[i] = self.lower[i] - center[i]
                else:
                    step[i] = self.upper[i] - center[i]
            vertices.append(step_inside(center, center + step, self.lower, self.upper))
        return np.array(vertices)

    def make_state(
        self,
        stage: Stage,
        vertices: np.ndarray,
        losses: tuple[float, ...],
        x_r: np.ndarray | None = None,
        f_r: float = math.inf,
        step: int = 0,
        restarts: int = 0,
        anchor: float = math.inf,
        c: np.ndarray | None = None,
    ) -> SimplexState:
        """Return the state with these fields and the point it asks for (see :class:`SimplexState`).

        ``c``, the centroid of ``vertices`` but the last, is computed unless given.

        Raises
        ------
        ValueError
            If ``stage`` comes after a reflection and ``x_r`` is missing.
        """
        if stage in (Stage.DESIGN, Stage.SHRINK):
            point, c = vertices[len(losses)], None
        else:
            c = centroid(vertices) if c is None else c
            if stage is Stage.REFLECT:
                point = step_inside(c, reflect(c, vertices[-1], self.alpha), self.lower, self.upper)
            elif stage is Stage.CONTRACT_IN:
                point = contract_inside(c, vertices[-1], self.rho)
            elif x_r is None:
                raise ValueError(f"x_r: the stage {stage.name} needs the reflection point")
            elif stage is Stage.EXPAND:
                point = step_inside(c, expand(c, x_r, self.gamma), self.lower, self.upper)
            else:
                point = contract_outside(c, x_r, self.rho)
        return SimplexState(stage, vertices, losses, x_r, f_r, step, restarts, anchor, point, c)

    def state_from_plain(self, plain: Mapping[str, Any]) -> SimplexState:
        """Rebuild a state from :meth:`SimplexState.to_plain`."""
        x_r = plain["x_r"]
        return self.make_state(
            Stage(int(plain["stage"])),
            np.array(plain["vertices"], dtype=np.float64),
            tuple(float(f) for f in plain["losses"]),
            None if x_r is None else np.array(x_r, dtype=np.float64),
            float(plain["f_r"]),
            int(plain["step"]),
            int(plain["restarts"]),
            float(plain["anchor"]),
        )

    def tell(self, state: SimplexState, f: float) -> SimplexState:
        """Return the state after the loss ``f`` of ``state.point`` (Nelder & Mead's decisions)."""
        x, losses = state.point, state.losses

        def then(
            stage: Stage,
            vertices: np.ndarray,
            losses: tuple[float, ...],
            x_r: np.ndarray | None = None,
            f_r: float = math.inf,
        ) -> SimplexState:
            # The centroid carries over while the vertices stay the same.
            c = state.c if vertices is state.vertices else None
            return self.make_state(
                stage, vertices, losses, x_r, f_r, state.step + 1, state.restarts, state.anchor, c
            )

        if state.stage in (Stage.DESIGN, Stage.SHRINK):
            losses = (*losses, f)
            if len(losses) <= self.n:
                return then(state.stage, state.vertices, losses)
            return self.restart(then(Stage.REFLECT, *_sorted(state.vertices, losses)))
        if state.stage is Stage.REFLECT:
            if f < losses[0]:
                return then(Stage.EXPAND, state.vertices, losses, x, f)
            if f < losses[-2]:
                return self.restart(then(Stage.REFLECT, *_replace_worst(state, x, f)))
            stage = Stage.CONTRACT_OUT if f < losses[-1] else Stage.CONTRACT_IN
            return then(stage, state.vertices, losses, x, f)
        if state.stage is Stage.EXPAND:
            assert state.x_r is not None  # the stages after REFLECT carry the reflection point
            kept = (x, f) if f < state.f_r else (state.x_r, state.f_r)
            return self.restart(then(Stage.REFLECT, *_replace_worst(state, *kept)))
        if (state.stage is Stage.CONTRACT_OUT and f <= state.f_r) or (
            state.stage is Stage.CONTRACT_IN and f < losses[-1]
        ):
            return self.restart(then(Stage.REFLECT, *_replace_worst(state, x, f)))
        return then(Stage.SHRINK, shrink(state.vertices, self.sigma), losses[:1])

    def restart(self, state: SimplexState) -> SimplexState:
        """Return ``state``, or a new initial simplex around its best vertex if the simplex degenerated.

        A simplex degenerates when the spread of its vertices along one parameter falls below :attr:`FLAT`
        times the largest spread (both relative to the ranges): Nelder–Mead cannot regain a lost direction.
        The new simplex has edges of the largest spread. It happens only if the best loss improved since
        the last rebuild, so the method never rebuilds the same simplex twice. A simplex that collapsed onto
        one point is rebuilt with the initial edge lengths halved once per rebuild.
        """
        free = self.upper > self.lower  # a parameter with a zero-width range has no direction to lose
        if not free.any():
            return state
        spread = np.ptp(state.vertices[:, free], axis=0) / (self.upper - self.lower)[free]
        largest = float(spread.max())
        if largest > 0 and (spread.min() >= self.FLAT * largest or not state.losses[0] < state.anchor):
            return state
        edge = largest * (self.upper - self.lower) if largest > 0 else self.edge * 0.5**state.restarts
        return self.make_state(
            Stage.DESIGN,
            self.design(state.vertices[0], edge),
            state.losses[:1],
            step=state.step,
            restarts=state.restarts + 1,
            anchor=state.losses[0],
        )

    # --- the replica and the points to evaluate -------------------------------------------------------------

    def observe(self, ind: Individual) -> None:
        """Learn the loss of an individual that entered the worker's population; O(1).

        Completed evaluations count with their loss, pruned ones with their last interim loss, failed ones
        as infinitely bad. Individuals not evaluated (interrupted, or pending without a finite loss) are
        ignored; a pending one with a finite loss counts as evaluated (individuals made by hand, as in
        Propulate 1.2.2, have no status). Whether ``ind`` is active, and whether it was bred on this island,
        does not matter (see the module docstring). An individual is learned from once (by ``uid``, where
        it has one).

        Parameters
        ----------
        ind : Individual
            The individual; not modified.
        """
        uid = ind.uid
        if uid >= 0:
            if uid in self._seen:
                return
            self._seen.add(uid)
        status = ind.status
        loss = math.inf if status is Status.FAILED else loss_order(ind)
        if status is Status.INTERRUPTED or (status is Status.PENDING and loss == math.inf):
            return  # not evaluated
        key = _key(ind.position)
        known = self._known.get(key)
        if known is None or loss < known:
            self._known[key] = loss
            if known is not None:
                # A replica that used the higher loss would part from those that learned the lower one
                # first: it follows the trajectory again from the start (rare: a point evaluated twice with
                # different losses).
                self._state = None
        if status is not Status.FAILED and ind.rank == 0 and ind.migration_steps == 0 and ind.generation >= 0:
            order = (ind.generation, ind.island, uid)
            if self._first_order is None or order < self._first_order:
                if self._first_order is not None and self.start is None:
                    self._state = None  # built from a later point of worker 0: start again
                self._first_order = order
                self._first = ind.position.copy()

    def _learn(self, inds: Sequence[Individual]) -> None:
        """Learn from individuals passed to a call: those after the last one learned from (arrival order)."""
        for ind in reversed(inds):
            if ind.uid >= 0 and ind.uid in self._seen:
                break
            self.observe(ind)

    def _loss(self, x: np.ndarray) -> float | None:
        return self._known.get(_key(x))

    def _start(self) -> SimplexState | None:
        """Return the initial state, or None while the start point is not known yet."""
        center = self.start if self.start is not None else self._first
        if center is None:
            return None
        return self.make_state(Stage.DESIGN, self.design(center), ())

    def _advance(self, state: SimplexState) -> SimplexState:
        """Follow the serial method through every point whose loss is known."""
        for _ in range(len(self._known) + 2 * (self.n + 1)):
            f = self._loss(state.point)
            if f is None:
                return state
            state = self.tell(state, f)
        return state  # only a trajectory that revisits known points forever ends here

    def _hypotheses(self, state: SimplexState) -> list[tuple[float, float]]:
        """Return (probability, loss) pairs: one representative loss of ``state.point`` per outcome."""
        f = state.losses
        if state.stage in (Stage.DESIGN, Stage.SHRINK):
            return [(1.0, f[-1] if f else 0.0)]  # every loss leads to the same next point
        if state.stage is Stage.REFLECT:
            candidates = [
                (f[0] + f[-2]) / 2 if f[0] < f[-2] else None,  # kept
                f[0] - 1.0 - abs(f[0]),  # expansion
                f[-1] + 1.0 + abs(f[-1]),  # inside contraction
                (f[-2] + f[-1]) / 2 if f[-2] < f[-1] else None,  # outside contraction
            ]
        elif state.stage is Stage.EXPAND:
            candidates = [state.f_r - 1.0 - abs(state.f_r), state.f_r]
        elif state.stage is Stage.CONTRACT_OUT:
            candidates = [state.f_r, state.f_r + 1.0 + abs(state.f_r)]
        else:
            candidates = [(f[-2] + f[-1]) / 2 if f[-2] < f[-1] else None, f[-1]]
        return [
            (p, value)
            for p, value in zip(self.OUTCOMES[state.stage], candidates, strict=True)
            if value is not None and math.isfinite(value)
        ]

    def speculate(self, state: SimplexState, count: int) -> list[np.ndarray]:
        """Return up to ``count`` distinct unevaluated points the method may ask for, likeliest first.

        Explores the outcomes of unknown losses best first (probabilities from :attr:`OUTCOMES`) and follows
        known losses as they are, among at most :attr:`MAX_EXPLORED` states. The first entry is
        ``state.point`` if that is unevaluated.
        """
        points: list[np.ndarray] = []
        listed: set[bytes] = set()
        tie = itertools.count()  # of equal probabilities, the first found first
        # Entries: (-probability, tie, a state, a loss to tell it first or None); told only when taken.
        frontier: list[tuple[float, int, SimplexState, float | None]] = [(-1.0, next(tie), state, None)]
        for _ in range(self.MAX_EXPLORED):
            if not frontier or len(points) == count:
                break
            negative_p, _, node, hypothesis = heapq.heappop(frontier)
            if hypothesis is not None:
                node = self.tell(node, hypothesis)
            f = self._loss(node.point)
            if f is not None:
                heapq.heappush(frontier, (negative_p, next(tie), node, f))
                continue
            key = _key(node.point)
            if key not in listed:
                listed.add(key)
                points.append(node.point)
            for p, value in self._hypotheses(node):
                heapq.heappush(frontier, (negative_p * p, next(tie), node, value))
        return points

    def replica(self, inds: Sequence[Individual] = ()) -> SimplexState | None:
        """Return the state of the serial method after every loss learned (None: no start point yet).

        This is the state the worker's next proposal starts from; workers that learned the same losses
        return the same state.

        Parameters
        ----------
        inds : sequence of Individual
            Individuals to learn from first (see :meth:`observe`), in arrival order; not modified.
        """
        self._learn(inds)
        if self._state is None:
            self._state = self._start()
        if self._state is not None:
            self._state = self._advance(self._state)
        return self._state

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Return a list of one new individual: entry ``island_rank`` of the points likely needed next.

        Proposals rejected since the last evaluation are left out of the list. Until the start point is
        known, and when every likely point was rejected, the point is drawn uniformly from the limits.

        Parameters
        ----------
        inds : list of Individual
            Individuals to learn from before breeding, in arrival order (not modified): none from the loop,
            which passes what it learns to :meth:`observe`; a population when called directly.
        """
        if not self._retrying:
            self._rejected.clear()
        self._retrying = False
        state = self.replica(inds)
        x = None
        if state is not None:
            wanted = self.island_rank + 1 + len(self._rejected)
            points = [p for p in self.speculate(state, wanted) if _key(p) not in self._rejected]
            if points:
                x = points[self.island_rank % len(points)]
        if x is None:
            x = self.space.sample(self.rng)
        return [Individual(x, self.space)]

    def reject(self, ind: Individual) -> None:
        """Leave ``ind``, the last proposal, out of the following calls until this worker's next evaluation.

        The loop discarded it as a duplicate: a peer evaluates that point already, or it is known. The next
        call proposes the next likely point instead.
        """
        self._rejected.add(_key(ind.position))
        self._retrying = True

    # --- checkpointing --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Return the replica of the serial method (the losses come back with the population)."""
        return {"state": None if self._state is None else self._state.to_plain()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; without a state the replica replays the trajectory from the start.

        The losses learned so far (the loop observes the restored population first) are kept. The
        ``"failed"`` entry of checkpoints written before failures were read from the status is ignored:
        the failed individuals are in the restored population.
        """
        self._state = None
        self._rejected.clear()
        self._retrying = False
        if state and state.get("state") is not None:
            self._state = self.state_from_plain(state["state"])

    def __repr__(self) -> str:
        return (
            f"ParallelNelderMead(alpha={self.alpha}, gamma={self.gamma}, rho={self.rho}, sigma={self.sigma}, "
            f"scale={self.scale})"
        )
