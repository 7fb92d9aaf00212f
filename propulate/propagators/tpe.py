"""The tree-structured Parzen estimator (TPE), made for asynchronous workers.

TPE (Bergstra, Bardenet, Bengio & Kégl, "Algorithms for hyper-parameter optimization", NeurIPS 2011) models
the results instead of the losses: the evaluated configurations are split at the ``gamma``-quantile of their
losses into the good ones, whose density is :math:`l(x)`, and the rest, :math:`g(x)`. Expected improvement at
that quantile grows with the density ratio :math:`l(x) / g(x)` (Bergstra et al. 2011, Sec. 4.1), so each
proposal draws ``n_candidates`` configurations from :math:`l` and keeps the one of largest ratio. Read as an
evolutionary algorithm, drawing from :math:`l` mutates the elite (a Gaussian kernel around each good
configuration) and the ratio pre-screens the offspring, as surrogate-assisted evolution does. The components
follow Watanabe ("Tree-structured Parzen estimator: understanding its algorithm components and their roles
for better empirical performance", arXiv:2304.11127, 2023) and Optuna's ``TPESampler`` (multivariate):

- the split: the best ``min(ceil(gamma n), gamma_max)`` of ``n`` results are good (``gamma = 0.1``,
  ``gamma_max = 25``); results that failed or were pruned are never good;
- the kernels: one product kernel per result over the parameters, plus a prior kernel (uniform categories,
  a Gaussian of the box's width at its centre) of weight ``prior_weight``; a numeric parameter's Gaussian is
  truncated to its range, on a log scale where the parameter has one, and an integer or stepped parameter
  scores the mass of its grid cell; a categorical kernel puts weight 1 on the result's category and spreads
  ``prior_weight / (n + 1)`` over all;
- the bandwidths: per numeric parameter, Scott's rule (the results' weighted spread times
  ``n^(-1/(d+4))``, Scott 1992), clipped to ``[range / min(100, n + 2), range]`` (Optuna's "magic clip"),
  so that the kernels narrow as the good results gather; Optuna's rule, the larger distance of each result
  to its sorted neighbours (hyperopt's), found worse configurations on the HPO tables of
  ``benchmarks/hpo_bench.py`` (see :doc:`/choosing`);
- the weights: equal for the last 25 results, falling linearly towards the oldest ones beyond;

Asynchronous workers. What is new here is what a worker knows that a sequential sampler does not: which
configurations its island's other workers evaluate right now (their announcements, see
:meth:`Propagator.pending`). Those enter :math:`g` as results that were not good (the constant liar,
Ginsbourger, Le Riche & Carraro, "Kriging is well-suited to parallelize optimization", 2010; Optuna's
``constant_liar``), so that ``W`` workers spread their proposals instead of drawing the same region.

Initial design. Until ``n_startup`` results are known, the island's workers evaluate points of one
scrambled Sobol sequence (Owen scrambling, ``scipy.stats.qmc.Sobol``) over the parameters: worker ``r`` of
``W`` takes points ``r, r + W, r + 2W, ...``, so the island covers the space evenly without a message. The
sequence is seeded alike on every worker: from ``seed``, the same on every rank
(:func:`propulate.utils.get_tpe_propagator` passes the run's seed), else from the search space. Islands
given the same seed start from the same design. Configurations the user already knows (``enqueue``, as
Optuna's ``enqueue_trial``) come first, shared out the same way.

Cost. A proposal costs O(n_candidates * n_results * n_parameters): the model keeps the last ``window``
results and, beyond them, the good ones of the whole run, so the cost stops growing at ``window`` results.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..individual import Individual, Status
from ..space import Kind, SearchSpace
from ..validation import check_int, check_real
from .base import Propagator

__all__ = ["TPE", "ParzenEstimator", "UnitCube"]

#: How many of the most recent results are weighted fully (Optuna's ``default_weights``).
FLAT_WEIGHTS = 25


class UnitCube:
    """A search space's parameters as coordinates in the unit cube, and back.

    A numeric parameter becomes one coordinate in ``[0, 1]``: its slot of the embedding (on a log scale
    where it has one) mapped linearly from its range, which for an integer or stepped parameter is widened
    by half a step on both ends so that every value owns a cell of equal width. A categorical parameter
    becomes the index of its category.

    Parameters
    ----------
    space : SearchSpace
        The search space.

    Attributes
    ----------
    numeric : tuple of Parameter
        The numeric parameters, in the order of their coordinates.
    categorical : tuple of Parameter
        The categorical parameters, in the order of their indices.
    cells : numpy.ndarray
        Shape ``(n_numeric,)``: the width of a value's cell for a parameter with a grid, 0 for a
        continuous one.
    """

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.numeric = tuple(p for p in space.parameters if p.kind is not Kind.CATEGORICAL)
        self.categorical = tuple(p for p in space.parameters if p.kind is Kind.CATEGORICAL)
        lows, highs, cells = [], [], []
        for p in self.numeric:
            low, high, cell = p.lower, p.upper, 0.0
            if p.step is not None:  # an integer or stepped range: one cell per value
                count = len(p.grid)
                if p.log:
                    # A log scale's values are not evenly spaced: their cells are the midpoints in log space.
                    low = math.log(max(p.low - 0.5 * p.step, p.low / 2))
                    high = math.log(p.high + 0.5 * p.step)
                else:
                    low, high = p.low - 0.5 * p.step, p.high + 0.5 * p.step
                    cell = 1.0 / count
            lows.append(low)
            highs.append(high)
            cells.append(cell)
        self._low = np.array(lows)
        self._width = np.array(highs) - self._low
        self._width[self._width == 0] = 1.0  # a range of one value
        self._slots = np.array([p.offset for p in self.numeric], dtype=np.intp)
        self._logs = np.array([p.log for p in self.numeric], dtype=bool)
        self.cells = np.array(cells)
        self.choices = np.array([p.width for p in self.categorical], dtype=np.intp)
        self._block_slots = np.array(
            [p.offset + k for p in self.categorical for k in range(p.width)], dtype=np.intp
        )
        self._block_places = np.array([k for p in self.categorical for k in range(p.width)], dtype=float)
        # (block slots, categorical parameters): which parameter each slot belongs to
        self._block_of = np.eye(len(self.categorical))[
            np.repeat(np.arange(len(self.categorical)), self.choices)
        ]

    def to_unit(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the coordinates of positions, each parameter read on its value.

        Parameters
        ----------
        positions : numpy.ndarray
            Shape ``(n, ndim)``.

        Returns
        -------
        numeric : numpy.ndarray
            Shape ``(n, n_numeric)``, in ``[0, 1]``.
        categories : numpy.ndarray
            Shape ``(n, n_categorical)``, ints: the index of each categorical parameter's category.
        """
        # SearchSpace.canonical reads every parameter on its value (a log scale's value, not its logarithm).
        values = np.array([np.frombuffer(self.space.canonical(p), dtype=np.float64) for p in positions])
        values = values.reshape(len(positions), self.space.ndim)
        numeric = values[:, self._slots]
        numeric[:, self._logs] = np.log(numeric[:, self._logs])
        numeric = np.clip((numeric - self._low) / self._width, 0.0, 1.0)
        # Each block is one-hot: its category's index is the sum of the slots weighted by their place.
        categories = np.rint(values[:, self._block_slots] * self._block_places @ self._block_of)
        return numeric, categories.astype(np.intp)

    def to_positions(self, numeric: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """Return positions of the embedding for coordinates (see :meth:`to_unit`); shape ``(n, ndim)``.

        Integer and stepped parameters land on their nearest value when the position is read.
        """
        count = len(numeric) if len(self.numeric) else len(categories)
        positions = np.zeros((count, self.space.ndim))
        if len(self.numeric):
            positions[:, self._slots] = self._low + np.clip(numeric, 0.0, 1.0) * self._width
        for j, p in enumerate(self.categorical):
            positions[np.arange(count), p.offset + categories[:, j]] = 1.0
        return np.clip(positions, self.space.lower, self.space.upper)

    def uniform(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``count`` coordinates uniformly (a log scale log-uniformly, every category alike)."""
        numeric = rng.random((count, len(self.numeric)))
        categories = rng.integers(0, self.choices, size=(count, len(self.categorical)))
        return numeric, categories

    def from_cube(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Read points of ``[0, 1)^(n_parameters)`` (e.g. a Sobol sequence) as coordinates.

        The first ``n_numeric`` columns are the numeric coordinates, the rest pick each categorical
        parameter's category by equal slices of ``[0, 1)``.
        """
        numeric = points[:, : len(self.numeric)]
        shares = points[:, len(self.numeric) :]
        categories = np.minimum((shares * self.choices).astype(np.intp), self.choices - 1)
        return numeric, categories


class ParzenEstimator:
    """A mixture of product kernels over unit-cube coordinates, one per result, plus a prior kernel.

    See the module docstring for the kernels and the bandwidth rule (Bergstra et al. 2011; Watanabe 2023).

    Parameters
    ----------
    numeric : numpy.ndarray
        Shape ``(n, n_numeric)``: the results' numeric coordinates, in ``[0, 1]``.
    categories : numpy.ndarray
        Shape ``(n, n_categorical)``: the results' category indices.
    weights : numpy.ndarray
        Shape ``(n,)``, positive: each result's weight.
    choices : numpy.ndarray
        Shape ``(n_categorical,)``: each categorical parameter's number of categories.
    cells : numpy.ndarray
        Shape ``(n_numeric,)``: a grid parameter's cell width (its kernels score the cell's mass), 0 for a
        continuous one.
    prior_weight : float > 0
        The weight of the prior kernel, relative to a result's.
    bandwidth : {"scott", "neighbour"}
        The rule for the kernels' widths (see :func:`_scott_bandwidths`, :func:`_neighbour_bandwidths`).
    """

    def __init__(
        self,
        numeric: np.ndarray,
        categories: np.ndarray,
        weights: np.ndarray,
        choices: np.ndarray,
        cells: np.ndarray,
        prior_weight: float,
        bandwidth: str = "scott",
    ) -> None:
        n, dims = numeric.shape
        self.cells = cells
        self._grid = cells > 0
        self.mu = np.vstack([numeric, np.full((1, dims), 0.5)])
        rule = _scott_bandwidths if bandwidth == "scott" else _neighbour_bandwidths
        self.sigma = np.vstack([rule(numeric, weights), np.ones((1, dims))])
        mixture = np.append(weights, prior_weight)
        self.log_weights = np.log(mixture / mixture.sum())
        # log of each truncated Gaussian's mass inside [0, 1], per kernel and coordinate
        self._log_mass = np.log(_ndtr((1.0 - self.mu) / self.sigma) - _ndtr(-self.mu / self.sigma))
        self.category_probabilities = []
        for j, count in enumerate(choices):
            table = np.full((n + 1, count), prior_weight / (n + 1))
            table[np.arange(n), categories[:, j]] += 1.0
            table[n] = 1.0
            self.category_probabilities.append(table / table.sum(axis=1, keepdims=True))

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``count`` coordinates: a kernel by its weight, then each coordinate from that kernel."""
        kernel = rng.choice(len(self.log_weights), size=count, p=np.exp(self.log_weights))
        mu, sigma = self.mu[kernel], self.sigma[kernel]
        # Inverse-CDF sampling of the truncated Gaussians.
        low, high = _ndtr(-mu / sigma), _ndtr((1.0 - mu) / sigma)
        uniform = low + rng.random(mu.shape) * (high - low)
        numeric = np.clip(mu + sigma * _ndtri(np.clip(uniform, 1e-300, 1 - 1e-16)), 0.0, 1.0)
        categories = np.empty((count, len(self.category_probabilities)), dtype=np.intp)
        for j, table in enumerate(self.category_probabilities):
            cumulative = table[kernel].cumsum(axis=1)
            draws = rng.random((count, 1))
            categories[:, j] = np.minimum((draws > cumulative).sum(axis=1), table.shape[1] - 1)
        return numeric, categories

    def log_pdf(self, numeric: np.ndarray, categories: np.ndarray) -> np.ndarray:
        """Return the log density of coordinates, shape ``(m,)`` (a grid parameter's cell mass)."""
        count = len(numeric) if numeric.size else len(categories)
        log_p = np.broadcast_to(self.log_weights, (count, len(self.log_weights))).copy()
        grid, smooth = self._grid, ~self._grid
        if smooth.any():
            sigma = self.sigma[:, smooth]
            z = (numeric[:, None, smooth] - self.mu[:, smooth]) / sigma
            log_density = -0.5 * z**2 - 0.5 * math.log(2 * math.pi) - np.log(sigma)
            log_p += (log_density - self._log_mass[:, smooth]).sum(axis=2)
        if grid.any():
            # The mass of the value's cell: the kernel integrated over it.
            cell = self.cells[grid]
            low = (np.floor(np.minimum(numeric[:, grid], 1.0 - 1e-12) / cell) * cell)[:, None, :]
            mu, sigma = self.mu[:, grid], self.sigma[:, grid]
            mass = _ndtr((low + cell - mu) / sigma) - _ndtr((low - mu) / sigma)
            log_p += (np.log(np.maximum(mass, 1e-300)) - self._log_mass[:, grid]).sum(axis=2)
        for j, table in enumerate(self.category_probabilities):
            log_p += np.log(table[:, categories[:, j]].T)
        top = log_p.max(axis=1, keepdims=True)
        return (top + np.log(np.exp(log_p - top).sum(axis=1, keepdims=True)))[:, 0]


def _scott_bandwidths(numeric: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per coordinate, Scott's rule: the weighted spread of the results times ``n^(-1/(d+4))``; ``(n, d)``.

    Scott, "Multivariate density estimation", 1992: the bandwidth of a product kernel in ``d`` dimensions
    shrinks as ``n^(-1/(d+4))``. Clipped as the neighbour rule is; below two results, Optuna's
    multivariate default ``0.2 n^(-1/(d+4))``.
    """
    n, dims = numeric.shape
    if n < 2:
        width = np.full(dims, 0.2 * max(n, 1) ** (-1.0 / (dims + 4)))
    else:
        share = weights / weights.sum()
        mean = share @ numeric
        spread = np.sqrt(share @ (numeric - mean) ** 2)
        width = spread * n ** (-1.0 / (dims + 4))
    return np.repeat(np.clip(width, 1.0 / min(100.0, n + 2.0), 1.0)[None, :], n, axis=0)


def _neighbour_bandwidths(numeric: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per result and coordinate, the larger gap to its sorted neighbours, magic-clipped; ``(n, d)``.

    The box's ends count as neighbours, except for the lowest and highest result, whose outer gap is
    replaced by their inner one (Optuna's ``consider_endpoints=False``).
    """
    n, dims = numeric.shape
    sigma = np.empty((n, dims))
    if n == 0:
        return sigma
    order = np.argsort(numeric, axis=0)
    ordered = np.take_along_axis(numeric, order, axis=0)
    padded = np.vstack([np.zeros((1, dims)), ordered, np.ones((1, dims))])
    gaps = np.maximum(padded[1:-1] - padded[:-2], padded[2:] - padded[1:-1])
    if n >= 2:
        gaps[0] = padded[2] - padded[1]
        gaps[-1] = padded[-2] - padded[-3]
    np.put_along_axis(sigma, order, gaps, axis=0)
    return np.clip(sigma, 1.0 / min(100.0, n + 2.0), 1.0)


def _ndtr(x: np.ndarray) -> np.ndarray:
    from scipy.special import ndtr

    return ndtr(x)


def _ndtri(p: np.ndarray) -> np.ndarray:
    from scipy.special import ndtri

    return ndtri(p)


class TPE(Propagator):
    """Tree-structured Parzen estimator for asynchronous workers: see the module docstring.

    The loop calls it with an empty list of parents (:attr:`breeding_pool` is 0): it proposes from the results
    it observed, its island's and immigrants alike (:meth:`observe`), and from what the island's other
    workers evaluate now (:meth:`pending`).

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space: any parameter types (log scales, steps, integers, categories of any type).
    rng : random.Random, optional
        This worker's generator (seeded differently on every rank; :func:`propulate.utils.rank_rng` derives
        one from a seed). Default: a fresh OS-seeded generator.
    n_startup : int >= 1
        How many results the island gathers from the initial design (and ``enqueue``) before the model
        proposes; Optuna's ``n_startup_trials``, 10. With ``W`` workers, up to ``W - 1`` more design points
        are under way when the model takes over.
    n_candidates : int >= 1
        Draws from the good results' density per proposal (Optuna's ``n_ei_candidates``, 24).
    gamma : float in (0, 1]
        The share of results that are good, ``min(ceil(gamma n), gamma_max)`` of ``n``.
    gamma_max : int >= 1
        The most results that are good.
    prior_weight : float > 0
        The weight of the prior kernel relative to one result's (1.0).
    window : int >= 25
        How many of the latest results the model keeps (besides the good ones of the whole run): the cost
        of a proposal stops growing there.
    enqueue : sequence of dict, optional
        Configurations to evaluate first, before the initial design (Optuna's ``enqueue_trial``), e.g.
        known good settings or the best of an earlier run (see :func:`propulate.utils.warm_start`); the
        island's workers share them out. Each maps every parameter name to a value of its range.
    seed : int >= 0, optional
        The seed of the initial design, the same on every rank of the island, so that its workers share out
        one Sobol sequence; pass the run's seed so that the design differs between runs. Default: derived
        from the search space (the same design in every run).

    Raises
    ------
    ValueError
        For out-of-range arguments and for an ``enqueue`` entry that does not fit ``limits`` (named in
        the message); from :meth:`observe`, for an individual with several objectives (TPE minimizes one
        loss; :class:`~propulate.propagators.NSGA2` handles several).
    """

    #: The rule for the kernels' widths, see :class:`ParzenEstimator`.
    bandwidth = "scott"

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
        n_startup: int = 10,
        n_candidates: int = 24,
        gamma: float = 0.1,
        gamma_max: int = 25,
        prior_weight: float = 1.0,
        window: int = 1000,
        enqueue: Sequence[Mapping[str, Any]] = (),
        seed: int | None = None,
    ) -> None:
        if not (rng is None or isinstance(rng, random.Random)):
            raise ValueError(f"rng: expected random.Random (one per rank), got {rng!r}")
        if seed is not None:
            check_int("seed", seed, 0)
        super().__init__(0, 1, rng)
        self.space = SearchSpace.of(limits)
        self.n_startup = check_int("n_startup", n_startup, 1)
        self.n_candidates = check_int("n_candidates", n_candidates, 1)
        self.gamma = check_real("gamma", gamma)
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma: expected a number in (0, 1], got {gamma!r}")
        self.gamma_max = check_int("gamma_max", gamma_max, 1)
        self.prior_weight = check_real("prior_weight", prior_weight)
        if not self.prior_weight > 0:
            raise ValueError(f"prior_weight: expected a positive number, got {prior_weight!r}")
        self.window = check_int("window", window, FLAT_WEIGHTS)
        self.enqueue = [self._encode_enqueued(i, values) for i, values in enumerate(enqueue)]
        self.cube = UnitCube(self.space)
        # The design's seed is the same on every worker of the island (see the module docstring).
        self._design_seed = seed if seed is not None else int(self.space.fingerprint, 16)
        self._design: np.ndarray | None = None  # positions of the Sobol points drawn so far
        self._generator = np.random.default_rng(self.rng.getrandbits(128))
        self._island_rank, self._island_size = 0, 1
        self._enqueued = 0  # enqueued configurations this worker proposed
        self._designed = 0  # design points this worker proposed
        self._ranked: list[np.ndarray] = []  # the last proposal's other candidates, best first
        self._rejected = False
        # The results the model keeps, in the order they arrived (see _forget).
        self._numeric: list[np.ndarray] = []
        self._categories: list[np.ndarray] = []
        self._losses: list[float] = []  # inf where the result cannot be good (failed, pruned)
        self._order: list[int] = []  # arrival number of each result kept
        self.observed = 0  # results observed in all, whatever was forgotten since
        self._pending = (
            np.zeros((0, len(self.cube.numeric))),
            np.zeros((0, len(self.cube.categorical)), int),
        )

    def _encode_enqueued(self, index: int, values: Mapping[str, Any]) -> np.ndarray:
        if not isinstance(values, Mapping):
            raise ValueError(f"enqueue[{index}]: expected a dict of parameter values, got {values!r}")
        try:
            position = self.space.encode(values)
            self.space.check_inside(position)
            return position
        except ValueError as err:
            raise ValueError(f"enqueue[{index}]: {err}") from None

    # ---------------------------------------------------------------------------------------- learning

    @property
    def breeding_pool(self) -> int | None:  # noqa: D102
        return 0  # it proposes from what it observed

    def bind(self, island_rank: int, island_size: int = 1) -> None:  # noqa: D102
        self._island_rank, self._island_size = int(island_rank), int(island_size)

    def observe(self, ind: Individual) -> None:
        """Take in a result: completed ones with a finite loss may be good, failed and pruned ones not."""
        if ind.losses is not None:
            raise ValueError("TPE minimizes one loss; for several objectives use propulate.propagators.NSGA2")
        if ind.status not in (Status.COMPLETED, Status.FAILED, Status.PRUNED):
            return
        numeric, categories = self.cube.to_unit(ind.position[None, :])
        loss = float(ind.loss)
        usable = ind.status is Status.COMPLETED and math.isfinite(loss)
        self._numeric.append(numeric[0])
        self._categories.append(categories[0])
        self._losses.append(loss if usable else math.inf)
        self._order.append(self.observed)
        self.observed += 1
        if len(self._losses) >= 2 * self.window:
            self._forget()

    def _forget(self) -> None:
        """Keep the last ``window`` results and the ``gamma_max`` best of the others."""
        count = len(self._losses)
        old = np.arange(count - self.window)
        best_old = old[np.argsort(np.array(self._losses)[old], kind="stable")[: self.gamma_max]]
        keep = np.concatenate([np.sort(best_old), np.arange(count - self.window, count)])
        self._numeric = [self._numeric[i] for i in keep]
        self._categories = [self._categories[i] for i in keep]
        self._losses = [self._losses[i] for i in keep]
        self._order = [self._order[i] for i in keep]

    def pending(self, positions: np.ndarray) -> None:
        """Remember what the island's other workers evaluate now: it counts as not good (constant liar)."""
        if positions.size:
            self._pending = self.cube.to_unit(positions)
        else:
            self._pending = (
                np.zeros((0, len(self.cube.numeric))),
                np.zeros((0, len(self.cube.categorical)), int),
            )

    def reject(self, ind: Individual) -> None:
        """Propose the next-best candidate of the last proposal next: this one is known already."""
        self._rejected = True

    # --------------------------------------------------------------------------------------- proposing

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Propose one configuration (``inds`` is not used: see :attr:`breeding_pool`)."""
        rejected, self._rejected = self._rejected, False
        position = self._next_enqueued()
        if position is None and self._usable() < self.n_startup:
            position = self._design_point()
        if position is None:
            if not (rejected and self._ranked):
                self._ranked = self._propose()
            position = self._ranked.pop(0)
        return [Individual(position, self.space)]

    def _usable(self) -> int:
        return sum(1 for loss in self._losses if math.isfinite(loss))

    def _next_enqueued(self) -> np.ndarray | None:
        index = self._island_rank + self._island_size * self._enqueued
        if index >= len(self.enqueue):
            return None
        self._enqueued += 1
        return self.enqueue[index].copy()

    def _design_point(self) -> np.ndarray:
        index = self._island_rank + self._island_size * self._designed
        self._designed += 1
        if self._design is None or index >= len(self._design):
            from scipy.stats import qmc

            count = 1 << max(6, math.ceil(math.log2(index + 1)))
            dims = len(self.cube.numeric) + len(self.cube.categorical)
            points = qmc.Sobol(dims, scramble=True, seed=self._design_seed).random(count)
            self._design = self.cube.to_positions(*self.cube.from_cube(points))
        return self._design[index].copy()

    def _propose(self) -> list[np.ndarray]:
        """Return the candidates drawn from the good results' density, best ratio first."""
        losses = np.array(self._losses)
        numeric = np.array(self._numeric)
        categories = np.array(self._categories, dtype=np.intp).reshape(len(losses), -1)
        usable = int(np.isfinite(losses).sum())
        n_good = max(1, min(math.ceil(self.gamma * min(self.observed, usable)), self.gamma_max, usable))
        order = np.argsort(losses, kind="stable")
        good, bad = order[:n_good], order[n_good:]
        weights = _age_weights(np.array(self._order), self.observed)
        cube = self.cube
        below = ParzenEstimator(
            numeric[good],
            categories[good],
            np.ones(n_good),
            cube.choices,
            cube.cells,
            self.prior_weight,
            self.bandwidth,
        )
        pending_numeric, pending_categories = self._pending
        above = ParzenEstimator(
            np.vstack([numeric[bad], pending_numeric]),
            np.vstack([categories[bad], pending_categories]),
            np.append(weights[bad], np.ones(len(pending_numeric))),
            cube.choices,
            cube.cells,
            self.prior_weight,
            self.bandwidth,
        )
        drawn_numeric, drawn_categories = below.sample(self._generator, self.n_candidates)
        score = below.log_pdf(drawn_numeric, drawn_categories) - above.log_pdf(
            drawn_numeric, drawn_categories
        )
        ranked = np.argsort(-score, kind="stable")
        positions = cube.to_positions(drawn_numeric[ranked], drawn_categories[ranked])
        return list(positions)

    # ------------------------------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:  # noqa: D102
        return {
            "enqueued": self._enqueued,
            "designed": self._designed,
            "generator": self._generator.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: D102
        self._enqueued = int(state["enqueued"])
        self._designed = int(state["designed"])
        self._generator.bit_generator.state = state["generator"]

    def __repr__(self) -> str:
        return (
            f"TPE(n_startup={self.n_startup}, n_candidates={self.n_candidates}, gamma={self.gamma}, "
            f"gamma_max={self.gamma_max}, prior_weight={self.prior_weight}, window={self.window}, "
            f"enqueue={len(self.enqueue)})"
        )


def _age_weights(arrival: np.ndarray, observed: int) -> np.ndarray:
    """Optuna's ``default_weights`` by age: 1 for the last 25 results, falling linearly to 1/n for older."""
    age = observed - 1 - arrival  # 0 for the latest
    if observed <= FLAT_WEIGHTS:
        return np.ones(len(arrival))
    # The i-th oldest of the n - 25 older ones weighs 1/n + (1 - 1/n) i / (n - 26).
    older = np.maximum(observed - 1 - age, 0) / max(observed - FLAT_WEIGHTS - 1, 1)
    return np.where(age < FLAT_WEIGHTS, 1.0, 1.0 / observed + (1.0 - 1.0 / observed) * np.minimum(older, 1.0))
