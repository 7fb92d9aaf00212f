r"""Parallel, asynchronous Nelder–Mead simplex search.

The simplex moves of Nelder & Mead (1965) with the coefficients of Lagarias et al. (1998), for a simplex
:math:`x_0, \dots, x_n` sorted best first (lowest loss) and the centroid :math:`c` of all vertices but the
one that moves, :math:`x_k`:

.. math::

    x_r &= c + \alpha (c - x_k)            && \text{reflection} \\
    x_e &= c + \gamma (x_r - c)            && \text{expansion} \\
    x_c &= c + \rho (x_r - c)              && \text{outside contraction} \\
    x_{cc} &= c - \rho (c - x_k)           && \text{inside contraction} \\
    x_i &\leftarrow x_0 + \sigma (x_i - x_0),\ i = 1, \dots, n   && \text{shrink towards the best vertex}

Parallel and asynchronous adaptation (after Lee & Wiswall 2007)
---------------------------------------------------------------
The simplex is not a private object: it is the best :math:`n + 1` distinct individuals with a finite loss of
the population the loop passes in, so every worker builds on what every other worker found. The worker with
island rank :math:`r` moves vertex :math:`k = n - (r \bmod n)` (rank 0 the worst, rank 1 the second worst,
...; the best vertex never moves) and reflects it with :math:`\alpha \rho^{q}`, :math:`q = \lfloor r / n
\rfloor`, so that workers beyond the :math:`n`-th try shorter steps instead of repeating a point. Each worker
runs one move at a time as a small state machine (reflect, then expand, contract or shrink as the loss of its
own last proposal decides, read back from the population). Its state is a few vectors
(:meth:`ParallelNelderMead.state_dict`); without it (a fresh start or a resume onto another layout) the
worker starts a new move from the population, which is always a valid Nelder–Mead step.

Until :math:`n + 1` individuals are evaluated the workers evaluate the initial design (see
:meth:`ParallelNelderMead.design_point`); worker :math:`r` takes the :math:`r`-th design point that is not in
the population yet, so no two workers of the same population propose the same point.

Boundary rule: a step from a base point :math:`b` inside the box (the centroid, the start or the best vertex)
towards :math:`t` is shortened to :math:`b + \lambda (t - b)` with the largest :math:`\lambda \le 1` that
stays inside the limits (:func:`step_inside`). Contractions and shrinks are convex combinations of points in
the box and never need it. Unlike clipping, this keeps the point on the line of the move and the simplex
non-degenerate.

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

import math
import random
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any

import numpy as np

from ..individual import Individual, loss_order
from ..space import Kind, SearchSpace
from .base import Propagator

__all__ = [
    "ParallelNelderMead",
    "centroid",
    "contract_inside",
    "contract_outside",
    "expand",
    "reflect",
    "shrink",
    "step_inside",
]


def centroid(simplex: np.ndarray, k: int) -> np.ndarray:
    """Return the centroid of all vertices of ``simplex`` (shape ``(n + 1, n)``) except vertex ``k``."""
    return (simplex.sum(axis=0) - simplex[k]) / (len(simplex) - 1)


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
    r"""Inside contraction :math:`x_{cc} = c - \rho (c - x)`, between centroid and moving vertex (eq. 2.6)."""
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
    """Return ``base + lam * (target - base)`` with the largest ``lam`` in [0, 1] inside ``[lower, upper]``.

    ``base`` must lie inside the box; the result lies on the segment from ``base`` to ``target`` (clipped
    once more against rounding).
    """
    d = target - base
    lam = 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(d > 0, (upper - base) / d, np.inf)
        down = np.where(d < 0, (lower - base) / d, np.inf)
    lam = float(min(lam, up.min(initial=np.inf), down.min(initial=np.inf)))
    return np.clip(base + max(lam, 0.0) * d, lower, upper)


class Phase(IntEnum):
    """Where a worker stands in its current Nelder–Mead move."""

    #: No move under way: the next call starts one with a reflection.
    IDLE = 0
    #: The reflection point was proposed; its loss decides the next step.
    REFLECTED = 1
    #: The expansion point was proposed; the move ends with it.
    EXPANDED = 2
    #: The outside contraction point was proposed.
    CONTRACTED_OUT = 3
    #: The inside contraction point was proposed.
    CONTRACTED_IN = 4
    #: The shrunk vertices are proposed one per call.
    SHRINKING = 5


def _key(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x, dtype=np.float64).tobytes()


class ParallelNelderMead(Propagator):
    r"""Asynchronous parallel Nelder–Mead: each worker moves a different vertex of the shared best simplex.

    See the module docstring for the moves, the parallel scheme, the initial design and the boundary rule.
    Takes all active individuals (``breeding_pool`` is ``None``) and returns a list of one new individual.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space; every parameter must be continuous (a ``(low, high)`` tuple of floats).
    rng : random.Random
        The generator owned by this propagator; used only to leave a point the simplex cannot get away from
        (every candidate of a collapsed simplex already evaluated). The initial design is deterministic.
    start : dict or array-like, optional
        The first vertex: parameter values as a dict, or a position of shape ``(n,)``; inside the limits.
        The centre of the box by default.
    alpha : float > 0
        Reflection coefficient :math:`\alpha` (Lagarias et al. 1998: 1).
    gamma : float > max(1, alpha)
        Expansion coefficient :math:`\gamma` (2).
    rho : float in (0, 1)
        Contraction coefficient :math:`\rho`, inside and outside (0.5).
    sigma : float in (0, 1)
        Shrink coefficient :math:`\sigma` (0.5).
    scale : float > 0
        Edge length of the initial simplex as a fraction of each parameter's range.

    Raises
    ------
    ValueError
        If ``limits`` has an integer or categorical parameter (named in the message), a coefficient is out
        of its range, or ``start`` does not fit the search space.

    Notes
    -----
    For many parameters the adaptive coefficients of Gao & Han (2012), :math:`\alpha = 1`,
    :math:`\gamma = 1 + 2/n`, :math:`\rho = 3/4 - 1/(2n)`, :math:`\sigma = 1 - 1/n`, often work better;
    :meth:`adaptive` builds the propagator with them.
    """

    #: A population member joins the simplex only if it is this far (relative) off the others' affine hull.
    FLATNESS = 0.05

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
        checks = {
            "alpha": (alpha, alpha > 0, "> 0"),
            "gamma": (gamma, gamma > 1 and gamma > alpha, "> 1 and > alpha"),
            "rho": (rho, 0 < rho < 1, "in (0, 1)"),
            "sigma": (sigma, 0 < sigma < 1, "in (0, 1)"),
            "scale": (scale, scale > 0 and math.isfinite(scale), "> 0"),
        }
        for name, (value, ok, allowed) in checks.items():
            if not ok:
                raise ValueError(f"{name}: expected a number {allowed}, got {value!r}")
        self.alpha, self.gamma, self.rho, self.sigma, self.scale = (
            float(alpha),
            float(gamma),
            float(rho),
            float(sigma),
            float(scale),
        )
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

    def _check_start(self, start: Mapping[str, float] | Sequence[float] | np.ndarray | None) -> np.ndarray:
        if start is None:
            return (self.lower + self.upper) / 2
        if isinstance(start, Mapping):
            x = self.space.encode(start)
        else:
            x = np.array(start, dtype=np.float64)
        if x.shape != (self.n,) or not np.all(np.isfinite(x)):
            raise ValueError(f"start: expected {self.n} finite values, got {start!r}")
        if np.any(x < self.lower) or np.any(x > self.upper):
            raise ValueError(f"start: {start!r} lies outside the limits {self.space.limits}")
        return x

    def _reset(self) -> None:
        self._phase = Phase.IDLE
        self._cycle: dict[str, Any] = {}
        self._queue: list[np.ndarray] = []
        self._last: np.ndarray | None = None
        self._simplex: np.ndarray | None = None
        self._losses = np.zeros(0)

    def bind(self, island_rank: int) -> None:
        """Take the vertex and design point of worker ``island_rank`` (see the module docstring)."""
        if island_rank != self.island_rank:
            self._reset()
        self.island_rank = int(island_rank)

    # --- initial design -------------------------------------------------------------------------------------

    def design_point(self, j: int) -> np.ndarray:
        """Return point ``j`` of the initial design, inside the limits.

        ``j = 0``: ``start``. ``j = 1..n``: ``start + h_i e_i`` with ``h = scale * (upper - lower)``,
        ``i = j - 1``, the opposite direction if only that one fits, else shortened to the farther bound.
        ``j = n+1..2n``: ``start - h_i e_i``, shortened to the bound. ``j > 2n``: ``start + h * u`` with
        ``u`` uniform in ``[-1, 1]^n`` from a generator seeded with ``j`` (reproducible everywhere), shortened
        by :func:`step_inside`. Points 0 to ``n`` form the initial simplex.
        """
        x0 = self.start
        if j == 0:
            return x0.copy()
        if j <= self.n:
            i = j - 1
            step = np.zeros(self.n)
            step[i] = self.edge[i]
            if x0[i] + step[i] > self.upper[i]:
                if x0[i] - step[i] >= self.lower[i]:
                    step[i] = -step[i]
                elif self.upper[i] - x0[i] < x0[i] - self.lower[i]:
                    step[i] = self.lower[i] - x0[i]
            return step_inside(x0, x0 + step, self.lower, self.upper)
        if j <= 2 * self.n:
            i = j - self.n - 1
            step = np.zeros(self.n)
            step[i] = -self.edge[i]
            return step_inside(x0, x0 + step, self.lower, self.upper)
        u = np.random.default_rng([0x4E4D, j]).uniform(-1.0, 1.0, self.n)
        return step_inside(x0, x0 + self.edge * u, self.lower, self.upper)

    def _design_proposal(self, known: dict[bytes, float]) -> np.ndarray:
        """Return the ``island_rank``-th design point not in the population yet."""
        seen: set[bytes] = set()
        missing = 0
        j = 0
        while True:
            x = self.design_point(j)
            key = _key(x)
            if key not in known and key not in seen:
                if missing == self.island_rank:
                    return x
                missing += 1
            seen.add(key)
            j += 1

    # --- the moves ------------------------------------------------------------------------------------------

    def vertex_of(self, island_rank: int) -> tuple[int, float]:
        """Return the vertex index ``k`` worker ``island_rank`` moves and its reflection coefficient."""
        k = self.n - island_rank % self.n
        return k, self.alpha * self.rho ** (island_rank // self.n)

    def _begin_move(self, simplex: np.ndarray, losses: np.ndarray) -> np.ndarray:
        k, alpha = self.vertex_of(self.island_rank)
        c = centroid(simplex, k)
        x_r = step_inside(c, reflect(c, simplex[k], alpha), self.lower, self.upper)
        self._cycle = {
            "c": c,
            "x_k": simplex[k].copy(),
            "f_k": float(losses[k]),
            "f_best": float(losses[0]),
            "f_accept": float(losses[k - 1]),  # the next better vertex; the second worst for k = n
            "x_r": x_r,
            "f_r": math.inf,
            "k": k,
        }
        self._phase = Phase.REFLECTED
        return x_r

    def _accept(self, x: np.ndarray, f: float) -> None:
        """Replace the moving vertex of this worker's simplex by ``x`` (Nelder & Mead's acceptance)."""
        k = int(self._cycle["k"])
        assert self._simplex is not None  # a move only starts once the simplex exists
        self._simplex[k] = x
        self._losses[k] = f

    def _next_step(self, f: float) -> np.ndarray | None:
        """Decide the move's next point from the loss ``f`` of the last proposal (None: move done)."""
        cyc = self._cycle
        c, phase = cyc["c"], self._phase
        if phase is Phase.REFLECTED:
            cyc["f_r"] = f
            if f < cyc["f_best"]:
                self._phase = Phase.EXPANDED
                return step_inside(c, expand(c, cyc["x_r"], self.gamma), self.lower, self.upper)
            if f < cyc["f_accept"]:
                self._accept(cyc["x_r"], f)
                return None
            if f < cyc["f_k"]:
                self._phase = Phase.CONTRACTED_OUT
                return contract_outside(c, cyc["x_r"], self.rho)
            self._phase = Phase.CONTRACTED_IN
            return contract_inside(c, cyc["x_k"], self.rho)
        assert self._last is not None
        if phase is Phase.EXPANDED:
            if f < cyc["f_r"]:
                self._accept(self._last, f)
            else:
                self._accept(cyc["x_r"], cyc["f_r"])
        elif (phase is Phase.CONTRACTED_OUT and f <= cyc["f_r"]) or (
            phase is Phase.CONTRACTED_IN and f < cyc["f_k"]
        ):
            self._accept(self._last, f)
        else:
            assert self._simplex is not None
            self._simplex = shrink(self._simplex, self.sigma)
            self._losses[1:] = math.inf
            first = int(cyc["k"]) - 1  # own vertex first, then the others in turn
            self._queue = [self._simplex[1 + (first + i) % self.n].copy() for i in range(self.n)]
            self._phase = Phase.SHRINKING
        return None

    def _select_simplex(self, inds: list[Individual]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return the best well-spread vertices: in loss order, each far enough from the others' hull.

        A candidate joins when the part of ``x - x_0`` orthogonal to the edges chosen so far is at least
        ``FLATNESS`` times its length. Returns the vertices (best first), their losses and an orthonormal
        basis of the edges, shape ``(m, n)``.
        """
        vertices: list[np.ndarray] = []
        losses: list[float] = []
        basis = np.zeros((0, self.n))
        for ind in sorted(inds, key=loss_order):
            x = ind.position
            if not vertices:
                vertices.append(x)
                losses.append(loss_order(ind))
                continue
            v = x - vertices[0]
            residual = v - basis.T @ (basis @ v)
            norm = float(np.linalg.norm(residual))
            if norm > self.FLATNESS * float(np.linalg.norm(v)) and norm > 0:
                vertices.append(x)
                losses.append(loss_order(ind))
                basis = np.vstack([basis, residual / norm])
                if len(vertices) == self.n + 1:
                    break
        return np.array(vertices, dtype=np.float64), np.array(losses), basis

    def _complete(self, simplex: np.ndarray, basis: np.ndarray) -> np.ndarray:
        """Return a point off the flat simplex: the best vertex moved along the least covered axis."""
        residual = 1.0 - np.sum(basis**2, axis=0)  # squared part of each axis orthogonal to the edges
        axes = np.argsort(-residual, kind="stable")[: self.n - len(basis)]
        i = int(axes[self.island_rank % len(axes)])
        sign = 1.0 if (self.island_rank // len(axes)) % 2 == 0 else -1.0
        spread = max((float(np.linalg.norm(x - simplex[0])) for x in simplex[1:]), default=0.0)
        length = spread if spread > 0 else float(self.edge[i])
        direction = np.eye(self.n)[i] - basis.T @ (basis @ np.eye(self.n)[i])
        direction /= np.linalg.norm(direction)
        x0 = simplex[0]
        forward = step_inside(x0, x0 + sign * length * direction, self.lower, self.upper)
        backward = step_inside(x0, x0 - sign * length * direction, self.lower, self.upper)
        if np.linalg.norm(backward - x0) > np.linalg.norm(forward - x0):
            return backward
        return forward

    def _propose(self, inds: list[Individual]) -> np.ndarray:
        known: dict[bytes, float] = {}
        for ind in inds:
            key = _key(ind.position)
            known[key] = min(known.get(key, math.inf), loss_order(ind))
        finite = [ind for ind in inds if math.isfinite(loss_order(ind))]
        if len(finite) < self.n + 1:
            return self._design_proposal(known)
        simplex, losses, basis = self._select_simplex(finite)
        if len(simplex) < self.n + 1:
            self._phase = Phase.IDLE
            completion = self._complete(simplex, basis)
            return completion if _key(completion) not in known else self._escape(simplex, known)

        if self._simplex is None:
            self._simplex, self._losses = simplex, losses
        proposal: np.ndarray | None = None
        if self._phase in (Phase.REFLECTED, Phase.EXPANDED, Phase.CONTRACTED_OUT, Phase.CONTRACTED_IN):
            f = known.get(_key(self._last)) if self._last is not None else None
            if f is None:  # own proposal not (or no longer) in the population: abandon the move
                self._phase = Phase.IDLE
            else:
                proposal = self._next_step(f)
                if proposal is None and self._phase is not Phase.SHRINKING:
                    self._phase = Phase.IDLE
        if proposal is None and self._phase is Phase.SHRINKING:
            while self._queue and proposal is None:
                x = self._queue.pop(0)
                if _key(x) not in known:
                    proposal = x
            if proposal is None:
                self._phase = Phase.IDLE
        if proposal is None:
            proposal = self._begin_move(*self._own_simplex(simplex, losses, known))
        if _key(proposal) in known:
            proposal = self._escape(self._simplex, known)
        return proposal

    def _own_simplex(
        self, simplex: np.ndarray, losses: np.ndarray, known: dict[bytes, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the worker's simplex, sorted, losses read back, the island's best vertex adopted."""
        own = self._simplex
        assert own is not None
        f = np.array([known.get(_key(x), math.inf) for x in own])
        if losses[0] < f.min() and _key(simplex[0]) not in {_key(x) for x in own}:
            worst = int(np.argmax(f))
            trial = own.copy()
            trial[worst] = simplex[0]
            if np.linalg.matrix_rank(trial[1:] - trial[0], tol=1e-12 * float(np.max(self.edge))) == self.n:
                own, f = trial, f.copy()
                f[worst] = losses[0]
        order = np.argsort(f, kind="stable")
        self._simplex, self._losses = own[order].copy(), f[order].copy()
        return self._simplex, self._losses

    def _escape(self, simplex: np.ndarray, known: dict[bytes, float]) -> np.ndarray:
        """Return a new point when the move's one is already evaluated: own vertex pulled to the best."""
        self._phase = Phase.IDLE
        k, _ = self.vertex_of(self.island_rank)
        for m in range(1, 64):
            x = simplex[0] + self.sigma**m * (simplex[k] - simplex[0])
            if _key(x) not in known:
                return x
        # The simplex collapsed onto evaluated points: a small random step around the best vertex.
        u = np.array([self.rng.uniform(-1.0, 1.0) for _ in range(self.n)])
        return step_inside(simplex[0], simplex[0] + 1e-6 * self.edge * u, self.lower, self.upper)

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Return a list of one new individual: the next point of this worker's move.

        Parameters
        ----------
        inds : list of Individual
            The island's active individuals (not modified).
        """
        x = self._propose(inds)
        self._last = x.copy()
        return [Individual(x, self.space)]

    # --- checkpointing --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Return the worker's move: phase, its vectors and losses, the shrink queue, its last proposal."""
        return {
            "island_rank": self.island_rank,
            "phase": int(self._phase),
            "cycle": {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in self._cycle.items()},
            "queue": [x.tolist() for x in self._queue],
            "last": None if self._last is None else self._last.tolist(),
            "simplex": None if self._simplex is None else self._simplex.tolist(),
            "losses": self._losses.tolist(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; a state of another worker or an empty one starts a fresh move."""
        self._reset()
        if not state or int(state.get("island_rank", -1)) != self.island_rank:
            return
        self._phase = Phase(int(state["phase"]))
        self._cycle = {
            k: np.array(v, dtype=np.float64) if isinstance(v, list) else v for k, v in state["cycle"].items()
        }
        self._queue = [np.array(x, dtype=np.float64) for x in state["queue"]]
        self._last = None if state["last"] is None else np.array(state["last"], dtype=np.float64)
        self._simplex = None if state["simplex"] is None else np.array(state["simplex"], dtype=np.float64)
        self._losses = np.array(state["losses"], dtype=np.float64)

    def __repr__(self) -> str:
        return (
            f"ParallelNelderMead(alpha={self.alpha}, gamma={self.gamma}, rho={self.rho}, sigma={self.sigma}, "
            f"scale={self.scale})"
        )
