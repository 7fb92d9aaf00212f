"""Covariance matrix adaptation evolution strategy (CMA-ES) for asynchronous workers.

The strategy follows N. Hansen, "The CMA Evolution Strategy: A Tutorial", arXiv:1604.00772 (2016); equation
numbers below refer to it. The active covariance update (negative weights for the worst individuals) is the
one of G. A. Jastrebski and D. V. Arnold, "Improving Evolution Strategies through Active Covariance Matrix
Adaptation", IEEE CEC 2006, in the form of Hansen 2016, Sec. 3.6 and eqs. (46)-(53).

Parallel design: one strategy per island, replicated on every worker. Each worker keeps its own copy of
the strategy and feeds it every result of the island through :meth:`CMAPropagator.observe`, in the order in
which the evaluations ended (``evaltime``, then ``uid``), whichever worker evaluated them; every ``lambda``
consecutive results form one generation and make one update. Since every worker learns the same results
in the same order with the same deterministic update, the copies are identical (a replicated state
machine, F. B. Schneider, "Implementing Fault-Tolerant Services Using the State Machine Approach", ACM
Computing Surveys 22(4), 1990): the island performs about ``evaluations / lambda`` updates, as a
synchronous CMA-ES with population ``lambda`` does, and no worker waits for anybody. ``lambda`` grows with
the square root of the number of workers ``W`` (:meth:`CMAPropagator.bind`), so that an evaluation spans
about ``(W - 1) / lambda``, at most ``sqrt(W) / 4``, updates.

Four rules make the results of such an island usable, as they are drawn while earlier ones are still being
evaluated, and a fifth spreads a generation's samples over the island as one strategy would spread them:

- Tags. Each offspring carries the distribution it was drawn from, ``(generation, mean, sigma)``, as the
  attribute ``cma_sample``, which travels with it to the island's peers (not to the checkpoint).
- Injection. A result that was not drawn from the current distribution (drawn before the latest update, an
  immigrant from another island, one without a tag such as a restored one) is an injected solution in the
  sense of N. Hansen, "Injecting External Solutions Into CMA-ES", arXiv:1110.4181 (2011): its step from the
  current mean is clipped to the Mahalanobis length ``sqrt(n) + 2 n / (n + 2)``, so that no single point can
  derail the mean, the step size or the covariance matrix. The mean moves to the weighted recombination of
  the best (clipped) points (Hansen 2016, eq. (42) with ``c_m = 1``), the step size follows that move.
  Results without a tag get no negative weight (as in N. Hansen's ``pycma``).
- Own-frame steps for the covariance matrix. The rank-mu update learns each tagged result's step in the
  distribution it was drawn from, ``(x - m_g) / sigma_g``, a sample of ``N(0, C_g)`` whatever happened since;
  the step from the moved mean would teach the covariance matrix the mean's own motion instead. (Taking each
  sample in the distribution it was drawn from is the idea of T. Glasmachers, "A Natural Evolution Strategy
  with Asynchronous Strategy Updates", GECCO 2013.)
- Delay compensation. An offspring is evaluated while about ``(island_size - 1) / lambda`` updates happen,
  so it is drawn from the distribution predicted for the time its result is learned: around the mean moved
  ahead by that many mean shifts, each estimated as the exponential average of the recent mean shifts
  (``CMAParameter.drift``, in units of the step size), and with the step size changed by as many recent
  rates of change (``CMAParameter.sigma_trend``, the exponential average of ``ln(sigma_(g+1) / sigma_g)``).
  This is the weight prediction from smoothed updates that C.-C. Chen, C.-L. Yang and H.-Y. Cheng,
  "Efficient and Robust Parallel DNN Training through Model Parallelism on Multi-GPU Platform",
  arXiv:1809.02839 (2018), use against stale weights, applied to both parameters of the distribution.
  The mean shifts are averaged at the rate ``c_c / 2``, half that of the evolution path ``p_c`` (whose
  stationary value, the recent mean shift times ``sqrt((2 - c_c) mu_eff / c_c) / sigma``, served before):
  once the strategy converges, a mean shift is mostly the random part of selection, which the longer
  average halves in variance. A converging strategy shrinks its step size by a roughly constant factor
  per update, so the step size predicted for the time of learning is the one a synchronous strategy would
  sample with then. Measured with ``benchmarks/cmaes_scaling.py`` (10-D, 6,000 evaluations, 20 seeds),
  against predicting the mean from ``p_c`` alone: the two predictions lowered the median best loss of 16
  workers 36-fold on the ellipsoid, 2.5e4-fold on the sphere and 3.4-fold on Rosenbrock, and of 4 workers
  10-fold on the ellipsoid and 100-fold on the sphere; on Rosenbrock with 4 workers the median of 40 seeds
  rose from 9.3e-13 to 3.3e-12 (16 of 40 seeds better, Wilcoxon p 0.13; synchronous ``cmaes`` 2.1e-12),
  3 % more evaluations to reach 1e-8. The step-size prediction alone gained half
  as much on the ellipsoid; averaging the mean shifts at ``c_c / 4`` or ``c_c / 10``, or shrinking the
  predicted shift to zero where ``p_c`` looks like noise (positive-part James-Stein), converged faster on
  the sphere but lost one to three decades on Rosenbrock, where the mean follows a curved valley.
- Shared directions. Since the copies agree, the workers share out the directions of a generation's
  samples without a message, as mirrored orthogonal sampling draws them (H. Wang, M. Emmerich and T. Bäck,
  "Mirrored Orthogonal Sampling for Covariance Matrix Adaptation Evolution Strategies", Evolutionary
  Computation 27(4), 2019): pairs of opposite directions, the pairs orthogonal to each other, each
  sample with a chi-distributed length of its own (:meth:`CMAPropagator._shared_direction`). Independent
  samples of one generation point in random, partly redundant directions; these cover the directions
  evenly, which Wang et al. show to speed up the progress on the sphere. Measured as above (20
  seeds, median best loss over synchronous ``cmaes``): 16 workers 0.00044 on the sphere (14 before),
  0.13 on the ellipsoid (61), 0.092 on Rosenbrock (130); 4 workers 7e-6, 2.6e-5 and 6e-8 (0.017, 2.1,
  17); 64 workers (5 seeds) 4e-6, 5.9e-5 and 0.54 (2.5e-5, 0.01, 0.82); on the 10-D Rastrigin and
  Schwefel functions, where a smaller step size could mean an earlier local minimum (mirroring with
  weighted recombination biases the step size downwards: A. Auger, D. Brockhoff and N. Hansen,
  "Mirrored Sampling in Evolution Strategies with Weighted Recombination", GECCO 2011), no difference
  beyond the noise (10 seeds, paired against independent samples: better on 7, 4, 5 and 4 of 10 at 4 and
  16 workers; medians 8.5 against 13.4 and 7.0 against 6.5 on Rastrigin, 1,708 against 1,836 and 1,826
  against 1,826 on Schwefel).
  With one worker the samples stay independent, so the updates stay those of ``cmaes.tell``.

The first generation of an island of several workers is special: each worker drew its first offspring
around its own random initial mean, so every first result counts as drawn from the current distribution of
its drawer (tags), the mean becomes the weighted recombination of their best and the paths their weighted
steps; from then on the copies agree. A worker learns the results waiting for it when it breeds, except
those that ended in the last ``margin`` seconds (its own among them): at least ``MARGIN`` (5 %) of the mean
evaluation time, so that peers' results still on their way are learned in their place. A result that
arrives after a later one was learned is learned at once; the margin then grows to 1.5 times its lateness
(at most half the mean evaluation time). Messages slower than that make the copies differ a little; they
stay close, since the mean is anchored to the same points.

With one worker every result is drawn from the current distribution and learned before the next offspring
is drawn: the updates are those of the synchronous CMA-ES (``cmaes.CMA.tell``).

The strategy works in the unit box: each parameter ``x`` with limits ``(low, high)`` is searched as
``(x - (low + high) / 2) / (high - low)`` in [-1/2, 1/2], so one step size fits all parameters at the start,
and a point near the centre of the box keeps the full floating-point resolution.
"""

from __future__ import annotations

import collections
import hashlib
import math
import random
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ..individual import Individual, Status
from ..space import Kind, SearchSpace
from ..validation import check_int
from .base import Propagator

__all__ = ["ActiveCMA", "BasicCMA", "CMAAdapter", "CMAParameter", "CMAPropagator"]

#: Initial step size in the unit box (Hansen 2016, Appendix A: 0.3 of the range for a random start).
SIGMA0 = 0.3
#: Floors of the step size and of the covariance entries: once the losses of a converged strategy stop
#: telling its samples apart, it keeps sampling around its mean instead of underflowing to zero.
SIGMA_MIN = 1e-20
C_MIN = 1e-100
#: Resampling attempts before an offspring outside the box is mirrored into it.
MAX_RESAMPLES = 10
#: The attribute of an offspring that names the distribution it was drawn from: ``(generation, mean,
#: sigma)`` with the mean in the unit box.
TAG = "cma_sample"
#: Results waiting to be learned, in multiples of ``lambda``, before the oldest are learned anyway (a
#: worker learns the waiting ones when it breeds; one busy with a long evaluation would collect without
#: bound). The same number of the latest learned results is kept to complete a resumed state.
PENDING_LIMIT = 4
#: The least a worker holds back, as a fraction of the mean evaluation time: results that ended that
#: recently are learned at its next breeding, so that those still on their way are learned in order.
MARGIN = 0.05


class _Result(NamedTuple):
    """What a result teaches, kept until it is learned: the sort key, the point and the tag."""

    evaltime: float
    uid: int
    arrival: int
    loss: float
    position: np.ndarray
    tag: tuple[int, np.ndarray, float] | None


class CMAAdapter:
    """How the covariance matrix learns: the recombination weights of the ranked individuals.

    The update of the covariance matrix is Hansen 2016, eq. (47) for every adapter; adapters differ in the
    weights of the individuals below the ``mu`` best (zero for :class:`BasicCMA`, negative for
    :class:`ActiveCMA`).
    """

    #: Whether the worst individuals of a generation get negative weights.
    active = False

    def negative_weights(
        self, w_prime: np.ndarray, n: int, mu_eff: float, c_1: float, c_mu: float
    ) -> np.ndarray:
        """Return the weights of the individuals ranked ``mu + 1 .. lambda``.

        Parameters
        ----------
        w_prime : numpy.ndarray
            The raw weights of eq. (49) of those ranks (all negative or zero), shape ``(lambda - mu,)``.
        n : int
            The dimension.
        mu_eff : float
            The variance effective selection mass of the positive weights.
        c_1, c_mu : float
            The rank-one and rank-mu learning rates.
        """
        return np.zeros_like(w_prime)


class BasicCMA(CMAAdapter):
    """Rank-one and rank-mu update of the ``mu`` best individuals (Hansen 2016, eq. (47) with w_i >= 0)."""


class ActiveCMA(CMAAdapter):
    """Active update: the worst individuals also teach, with negative weights (Jastrebski & Arnold 2006).

    The negative weights are scaled as in Hansen 2016, eqs. (50)-(53), which keeps the covariance matrix
    positive definite.
    """

    active = True

    def negative_weights(  # noqa: D102
        self, w_prime: np.ndarray, n: int, mu_eff: float, c_1: float, c_mu: float
    ) -> np.ndarray:
        total = np.sum(np.abs(w_prime))
        if total == 0.0:
            return np.zeros_like(w_prime)
        mu_eff_neg = np.sum(w_prime) ** 2 / np.sum(w_prime**2)
        alpha_mu = 1.0 + c_1 / c_mu  # Hansen 2016, eq. (50)
        alpha_mu_eff = 1.0 + 2.0 * mu_eff_neg / (mu_eff + 2.0)  # Hansen 2016, eq. (51)
        alpha_posdef = (1.0 - c_1 - c_mu) / (n * c_mu)  # Hansen 2016, eq. (52)
        return min(alpha_mu, alpha_mu_eff, alpha_posdef) / total * w_prime  # Hansen 2016, eq. (53)


class CMAParameter:
    """The state of one CMA-ES: distribution, evolution paths and learning rates (Hansen 2016, Appendix A).

    Vectors live in the unit box of the search space.

    Parameters
    ----------
    n : int >= 1
        The dimension.
    lambda_ : int >= 2
        The population size (individuals per generation).
    mean : numpy.ndarray
        The initial mean, shape ``(n,)``.
    sigma : float > 0
        The initial step size.
    adapter : CMAAdapter
        Gives the weights of the individuals below the ``mu`` best.

    Attributes
    ----------
    mean : numpy.ndarray
        The distribution mean m, shape ``(n,)``.
    sigma : float
        The step size.
    C : numpy.ndarray
        The covariance matrix, shape ``(n, n)``; ``C = B diag(D**2) B^T``.
    B : numpy.ndarray
        The eigenvectors of ``C`` as columns, shape ``(n, n)``, from the last decomposition.
    D : numpy.ndarray
        The square roots of the eigenvalues of ``C``, shape ``(n,)``, from the last decomposition.
    p_sigma, p_c : numpy.ndarray
        The evolution paths of the step size and of the covariance matrix, shape ``(n,)``.
    drift : numpy.ndarray
        The exponential average (rate ``c_c / 2``) of the mean shifts per update, in units of the step size
        before each, shape ``(n,)``: the predicted shift per update of the delay compensation.
    sigma_trend : float
        The exponential average (rate ``c_sigma``) of ``ln(sigma_(g+1) / sigma_g)``: the predicted change of
        the step size per update.
    weights : numpy.ndarray
        The recombination weights by rank, best first, shape ``(lambda_,)``: ``mu`` positive ones summing
        to 1, then zero (basic) or negative (active) ones.
    mu : int
        The number of positively weighted individuals, ``lambda_ // 2``.
    mu_eff, c_sigma, d_sigma, c_c, c_1, c_mu, chi_n : float
        The selection mass and learning rates of Hansen 2016, eqs. (55)-(58), and ``E||N(0, I)||``.
    generation : int
        The number of updates performed.
    eigen_generation : int
        The generation of the last decomposition of ``C``.
    """

    def __init__(self, n: int, lambda_: int, mean: np.ndarray, sigma: float, adapter: CMAAdapter) -> None:
        self.n = n
        self.lambda_ = lambda_
        self.mu = lambda_ // 2
        w_prime = math.log((lambda_ + 1) / 2) - np.log(np.arange(1, lambda_ + 1))  # Hansen 2016, eq. (49)
        positive = w_prime[: self.mu] / np.sum(w_prime[: self.mu])  # Hansen 2016, eq. (53), w_i >= 0
        self.mu_eff = float(1.0 / np.sum(positive**2))  # Hansen 2016, eq. (8)
        self.c_sigma = (self.mu_eff + 2) / (n + self.mu_eff + 5)  # Hansen 2016, eq. (55)
        self.d_sigma = 1 + 2 * max(0.0, math.sqrt((self.mu_eff - 1) / (n + 1)) - 1) + self.c_sigma
        self.c_c = (4 + self.mu_eff / n) / (n + 4 + 2 * self.mu_eff / n)  # Hansen 2016, eq. (56)
        alpha_cov = 2.0
        self.c_1 = alpha_cov / ((n + 1.3) ** 2 + self.mu_eff)  # Hansen 2016, eq. (57)
        self.c_mu = min(  # Hansen 2016, eq. (58)
            1 - self.c_1,
            alpha_cov * (self.mu_eff - 2 + 1 / self.mu_eff) / ((n + 2) ** 2 + alpha_cov * self.mu_eff / 2),
        )
        negative = adapter.negative_weights(w_prime[self.mu :], n, self.mu_eff, self.c_1, self.c_mu)
        self.weights = np.concatenate([positive, negative])
        self.chi_n = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n**2))  # E||N(0, I)||, Hansen 2016, p. 28
        self.mean = np.array(mean, dtype=np.float64)
        self.sigma = float(sigma)
        self.C = np.eye(n)
        self.B = np.eye(n)
        self.D = np.ones(n)
        self.p_sigma = np.zeros(n)
        self.p_c = np.zeros(n)
        self.drift = np.zeros(n)
        self.sigma_trend = 0.0
        self.generation = 0
        self.eigen_generation = 0

    def decompose(self) -> None:
        """Recompute ``B`` and ``D`` from ``C`` (symmetrized; eigenvalues kept positive)."""
        self.C = np.triu(self.C) + np.triu(self.C, 1).T
        eigenvalues, self.B = np.linalg.eigh(self.C)
        self.D = np.sqrt(np.maximum(eigenvalues, 1e-300))
        self.eigen_generation = self.generation

    def inv_sqrt_times(self, y: np.ndarray) -> np.ndarray:
        """Return ``C^(-1/2) y = B diag(1/D) B^T y`` for ``y`` of shape ``(n,)`` or ``(k, n)``."""
        return (y @ self.B / self.D) @ self.B.T

    _STATE = (
        "mean",
        "sigma",
        "C",
        "B",
        "D",
        "p_sigma",
        "p_c",
        "drift",
        "sigma_trend",
        "generation",
        "eigen_generation",
    )

    def state_dict(self) -> dict[str, Any]:
        """Return copies of the changing state (the learning rates follow from ``n`` and ``lambda_``)."""
        state = {key: getattr(self, key) for key in self._STATE}
        return {key: value.copy() if isinstance(value, np.ndarray) else value for key, value in state.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; a state saved without the predictions keeps them at 0."""
        for key in self._STATE:
            if key not in state:
                continue
            value = state[key]
            setattr(self, key, np.array(value, dtype=np.float64) if isinstance(value, np.ndarray) else value)


class CMAPropagator(Propagator):
    """Asynchronous CMA-ES: learn from every result of the island, sample one offspring per call.

    The design is the module's: a copy of the island's strategy on every worker, learning the island's
    results in the order their evaluations ended, one update per ``lambda`` results. A result is observed
    in O(1); it is learned (O(n^2), plus one update of O(lambda n^2) and now and then an eigendecomposition
    per ``lambda`` results) when the worker next breeds. A call costs O(n^2) whatever the length of the
    run: the loop passes no individuals (:attr:`breeding_pool` is 0). A population passed by hand (as
    Propulate 1.2.2's loop did) is learned from too, each individual once (see :meth:`__call__`).

    Usable results are completed and pruned ones (with their last interim loss); failed and interrupted
    evaluations teach nothing. A generation's results are ranked by loss (ties by the order they ended),
    the ``mu = lambda // 2`` best move the mean (Hansen 2016, eqs. (41)-(42)), the step size and the paths
    follow (eqs. (43)-(45)) and the covariance matrix learns (eqs. (46)-(47)); injected results are clipped
    (Hansen 2011) and the covariance matrix learns each result's step in the distribution it was drawn
    from, as the module docstring describes. Individuals from other islands (``migration_steps > 0``) are
    injected solutions, whatever their tag says.

    The offspring is ``x = m' + sigma' * B D z`` with ``z ~ N(0, I)`` (Hansen 2016, eqs. (38)-(40)) in the
    unit box of the search space, i.e. drawn from ``N(m', sigma'**2 C)`` with the learned covariance ``C``,
    where ``m'`` and ``sigma'`` are the mean and the step size predicted for the end of the evaluation, after
    the updates to come meanwhile (``m' = m`` and ``sigma' = sigma`` with one worker). Boundary rule: a
    sample outside the box is drawn again, up to ``MAX_RESAMPLES`` (10) times; if all fall outside, the last
    one is mirrored at the box faces, repeatedly. Offspring therefore always lie inside ``limits``. Learning
    uses the offspring as they were evaluated, after repair.

    The initial mean is uniform in the box (from this propagator's generator), the initial step size 0.3.

    Checkpoint: :meth:`state_dict` holds the strategy (mean, step size, covariance matrix and its
    decomposition, paths, counters), the results of the generation being collected and those waiting to
    be learned (at most ``PENDING_LIMIT * lambda``), the key of the last result learned, the margin and the
    generator: O(n^2 + lambda n) numbers, whatever the length of the run. Tags are not checkpointed. On
    resume the loop first observes the restored population (results without tags, injected), which
    rebuilds a strategy where no state was saved; :meth:`load_state_dict` then restores the saved state and
    learns again the restored results that ended after the last one it had learned (the state is saved
    about every 0.25 s), up to ``PENDING_LIMIT * lambda`` of them.

    Parameters
    ----------
    adapter : CMAAdapter
        :class:`BasicCMA` or :class:`ActiveCMA`.
    limits : dict or SearchSpace
        The search space; only float parameters: ``(low, high)`` or :class:`propulate.Float`. The
        distribution lives in the embedding: in ``ln(value)`` for a log scale (a log-normal search there).
    decompose_in_each_generation : bool
        Decompose ``C`` after every update; otherwise only once per ``1 / (10 n (c_1 + c_mu))``
        generations (Hansen 2016, Sec. B.2), in between sampling with the last ``B`` and ``D``.
    select_worst_all_time : bool
        Accepted for compatibility with Propulate 1.2.2, where :class:`ActiveCMA` gave the negative weights
        to the worst individuals of all time instead of the worst of the generation. It has no effect: those
        are far from the current distribution, i.e. injected solutions, which get no negative weights (as in
        N. Hansen's ``pycma``), and giving them negative weights in every generation shrinks the covariance
        matrix along the same few directions until it degenerates (the previous implementation of this
        option overflowed after about 1,000 evaluations of the 10-D ellipsoid).
    pop_size : int >= 2, optional
        ``lambda``, the results per update. By default ``max(4 + floor(3 ln n), ceil(4 sqrt(island_size)))``
        (Hansen 2016, eq. (48), grown with the island, see :meth:`bind`).
    pool_size : int >= 1
        Accepted for compatibility with Propulate 1.2.2, where the ``mu`` parents were drawn at random from
        the ``pool_size * mu`` best individuals. This propagator ranks whole generations instead, so it does
        not use it.
    rng : random.Random or int or numpy.random.Generator, optional
        Seeds this propagator's own ``numpy.random.Generator``; OS entropy if not given. The global random
        states are never used.

    Attributes
    ----------
    par : CMAParameter
        The strategy.

    Raises
    ------
    ValueError
        If ``limits`` holds an integer or categorical parameter, ``pop_size`` is below 2, ``pool_size`` below
        1, or ``adapter`` is not a :class:`CMAAdapter`.
    """

    def __init__(
        self,
        adapter: CMAAdapter,
        limits: Mapping[str, Any] | SearchSpace,
        decompose_in_each_generation: bool = False,
        select_worst_all_time: bool = False,
        pop_size: int | None = None,
        pool_size: int = 3,
        rng: random.Random | int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(-1, 1, rng if isinstance(rng, random.Random) else None)
        if not isinstance(adapter, CMAAdapter):
            raise ValueError(f"adapter: expected BasicCMA() or ActiveCMA(), got {adapter!r}")
        self.space = SearchSpace.of(limits)
        others = [p.name for p in self.space.parameters if p.kind is not Kind.FLOAT]
        if others:
            raise ValueError(
                f"limits: CMA-ES searches float ranges ((low, high) or propulate.Float) only, not {others}"
            )
        n = self.space.ndim
        self.pop_size = None if pop_size is None else check_int("pop_size", pop_size, 2)
        self.pool_size = check_int("pool_size", pool_size, 1)
        self.adapter = adapter
        self.decompose_in_each_generation = bool(decompose_in_each_generation)
        self.select_worst_all_time = bool(select_worst_all_time)
        self.np_rng = _numpy_generator(rng)
        self.center = (self.space.lower + self.space.upper) / 2
        self.width = np.where(self.space.upper > self.space.lower, self.space.upper - self.space.lower, 1.0)
        self.par = CMAParameter(n, self._lambda(1), self.np_rng.uniform(size=n) - 0.5, SIGMA0, adapter)
        self._island_size = 1
        self._island_rank = 0
        # Mirrored orthogonal sampling (see _shared_direction): the generation the shared directions are
        # of, how many this worker drew from it, and the orthogonal matrices built so far, by block.
        self._directions_of = -1
        self._directions_drawn = 0
        self._orthogonal: dict[int, np.ndarray] = {}
        self._clip = math.sqrt(n) + 2 * n / (n + 2)  # Hansen 2011, the longest step of an injection
        self._arrivals = 0
        self._pending: list[_Result] = []
        self._recent: collections.deque[_Result] = collections.deque(maxlen=PENDING_LIMIT * self.par.lambda_)
        self._last: tuple[float, int] = (-math.inf, -1)  # (evaltime, uid) of the last result learned
        self._margin = 0.0  # seconds of results held back, against late arrivals
        self._period = 0.0  # running mean of the evaluation times observed, seconds
        # The generation being collected: per result its loss, its point for the mean and its step for C.
        self._losses: list[float] = []
        self._points: list[np.ndarray] = []
        self._steps: list[np.ndarray] = []
        self._injected: list[bool] = []  # no step of its own (no tag): no negative weight
        self._sampling: tuple[int, np.ndarray, float] | None = None
        self._listed: Individual | None = None  # the last individual passed to a call

    def _lambda(self, island_size: int) -> int:
        if self.pop_size is not None:
            return self.pop_size
        default = 4 + int(3 * math.log(self.space.ndim))  # Hansen 2016, eq. (48)
        return max(default, math.ceil(4 * math.sqrt(island_size)))

    def bind(self, island_rank: int, island_size: int = 1) -> None:
        """Size the generations to the island: ``lambda = max(4 + floor(3 ln n), ceil(4 sqrt(W)))``.

        Unless ``pop_size`` was given; ``W`` is ``island_size``. An offspring's result is learned about
        ``(W - 1) / lambda`` updates after it was drawn: staler results teach less, a larger ``lambda``
        makes fewer updates. Measured with ``benchmarks/cmaes_scaling.py`` (10-D sphere, ellipsoid and
        Rosenbrock, 6,000 evaluations, 10-20 seeds, with independent samples): ``lambda = W`` was best at
        ``W = 16`` (12 and 10 were worse), ``lambda = W / 2`` to ``4 sqrt(W)`` beat ``lambda = W`` by a decade
        or more at ``W = 32`` and 64, and ``W = 8`` did slightly better with 10 than with 12. ``island_rank``
        numbers the worker's draws of each generation (see :meth:`_shared_direction`). Called by the loop
        before anything is observed; the distribution drawn at construction is kept.
        """
        self._island_size = check_int("island_size", island_size, 1)
        self._island_rank = check_int("island_rank", island_rank, 0)
        lambda_ = self._lambda(self._island_size)
        if lambda_ != self.par.lambda_:
            par = CMAParameter(self.par.n, lambda_, self.par.mean, self.par.sigma, self.adapter)
            par.load_state_dict(self.par.state_dict())
            self.par = par
            self._recent = collections.deque(self._recent, maxlen=PENDING_LIMIT * lambda_)
        self._sampling = None

    @property
    def breeding_pool(self) -> int:
        """0: this propagator learns through :meth:`observe`, so the loop passes no individuals."""
        return 0

    # ------------------------------------------------------------------------------------------ ask

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Learn what waits to be learned, then return a list of one offspring, tagged (see ``TAG``).

        Parameters
        ----------
        inds : list of Individual
            None from the loop, which passes every result to :meth:`observe`. Called directly with a
            population in arrival order (as Propulate 1.2.2's loop did), it first observes the individuals
            after the last one it knows, so that each is learned once; not modified.
        """
        self._observe_new(inds)
        self._learn_ready()
        generation, mean, sigma = self._sampling_distribution()
        offspring = Individual(self._sample(mean, sigma, self._shared_direction()), self.space)
        setattr(offspring, TAG, (generation, mean, sigma))
        return [offspring]

    def _sampling_distribution(self) -> tuple[int, np.ndarray, float]:
        """Return the distribution offspring are drawn from now, ``(generation, mean, sigma)``; cached.

        Delay compensation (module docstring): the mean and the step size predicted ``ahead`` updates on,
        from the averaged mean shift ``drift`` and the averaged change of the step size ``sigma_trend``.
        """
        par = self.par
        if self._sampling is None or self._sampling[0] != par.generation:
            mean, sigma = par.mean, par.sigma
            ahead = (self._island_size - 1) / par.lambda_  # updates during one evaluation
            if ahead > 0:
                mean = mean + ahead * par.sigma * par.drift
                sigma = max(sigma * math.exp(ahead * par.sigma_trend), SIGMA_MIN)
            self._sampling = (par.generation, mean, sigma)
        return self._sampling

    def _shared_direction(self) -> np.ndarray | None:
        """Return the direction of this worker's next draw from the current generation, shared out.

        Mirrored orthogonal sampling (H. Wang, M. Emmerich and T. Bäck, "Mirrored Orthogonal Sampling for
        Covariance Matrix Adaptation Evolution Strategies", Evolutionary Computation 27(4), 2019), spread
        over the workers without a message: the draws of one generation are numbered ``r + W j`` for the
        ``j``-th draw of worker ``r`` of ``W``; draws ``2 i`` and ``2 i + 1`` take the column ``i mod n`` of
        the ``floor(i / n)``-th random orthogonal ``n x n`` matrix of the generation, with opposite signs.
        The matrices are drawn from a generator seeded with a hash of what every copy of the strategy
        holds alike (mean, covariance matrix, generation), so the island's workers share them out as one
        synchronous strategy would its ``lambda`` samples. Each column is uniform on the unit sphere and
        :meth:`_sample` gives it a chi-distributed length of its own, so every single sample is still
        ``N(0, I)``: where the copies differ a little (late messages), the draws are merely independent.

        ``None``, for independent draws, with one worker (the synchronous CMA-ES, unchanged) and in the
        first generation, whose offspring are drawn around each worker's own initial mean.
        """
        par = self.par
        generation = par.generation
        if self._island_size == 1 or generation == 0:
            return None
        if self._directions_of != generation:
            self._directions_of, self._directions_drawn, self._orthogonal = generation, 0, {}
        index = self._island_rank + self._island_size * self._directions_drawn
        self._directions_drawn += 1
        pair, mirrored = divmod(index, 2)
        block, column = divmod(pair, par.n)
        if block not in self._orthogonal:
            shared = par.mean.tobytes() + par.C.tobytes() + repr((generation, block)).encode()
            seed = int.from_bytes(hashlib.blake2b(shared, digest_size=16).digest(), "little")
            # The Q of the QR decomposition of a Gaussian matrix, signs fixed by R's diagonal: Haar
            # distributed (F. Mezzadri, "How to Generate Random Matrices from the Classical Compact Groups",
            # Notices of the AMS 54(5), 2007).
            q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((par.n, par.n)))
            self._orthogonal[block] = q * np.sign(np.diag(r))
        return (-1.0 if mirrored else 1.0) * self._orthogonal[block][:, column]

    def _sample(self, mean: np.ndarray, sigma: float, direction: np.ndarray | None = None) -> np.ndarray:
        """Draw a point of the unit box from ``N(mean, sigma^2 C)``.

        The first draw is ``direction`` (unit length) times a chi-distributed length, where given; the
        others, if it falls outside the box, are independent.
        """
        par = self.par
        for attempt in range(MAX_RESAMPLES):
            if attempt == 0 and direction is not None:
                z = direction * float(np.linalg.norm(self.np_rng.standard_normal(par.n)))
            else:
                z = self.np_rng.standard_normal(par.n)
            u = mean + sigma * (par.B @ (par.D * z))  # Hansen 2016, eqs. (38)-(40)
            if np.all(np.abs(u) <= 0.5):
                break
        else:
            u = np.mod(u + 0.5, 2.0)
            u = np.where(u > 1.0, 2.0 - u, u) - 0.5  # mirrored at the faces of the box
        return np.clip(self.center + u * self.width, self.space.lower, self.space.upper)

    # ----------------------------------------------------------------------------------------- tell

    def observe(self, ind: Individual) -> None:  # noqa: D102
        if ind.status not in _USABLE or math.isnan(ind.loss):
            return
        tag = getattr(ind, TAG, None) if ind.migration_steps == 0 else None
        if not (isinstance(tag, tuple) and len(tag) == 3):
            tag = None
        self._arrivals += 1
        result = _Result(ind.evaltime, ind.uid, self._arrivals, float(ind.loss), ind.position, tag)
        if math.isfinite(result.evaltime):
            if (result.evaltime, result.uid) < self._last:
                # A late arrival: hold back at least as long from now on (at most half an evaluation).
                self._margin = max(self._margin, 1.5 * (self._last[0] - result.evaltime))
            if ind.evalperiod > 0:
                self._period += (ind.evalperiod - self._period) / min(self._arrivals, 100)
        self._pending.append(result)
        if len(self._pending) >= PENDING_LIMIT * self.par.lambda_:
            self._learn_pending(keep=self.par.lambda_)

    def _observe_new(self, inds: list[Individual]) -> None:
        """Observe the individuals at the end of ``inds`` that this propagator does not know yet."""
        if not inds:
            return
        known = {r.uid for r in self._recent} | {r.uid for r in self._pending}
        start = len(inds)
        while start > 0:
            ind = inds[start - 1]
            if ind is self._listed or (ind.uid >= 0 and ind.uid in known):
                break
            if math.isfinite(ind.evaltime) and (ind.evaltime, ind.uid) <= self._last:
                break
            start -= 1
        for ind in inds[start:]:
            self.observe(ind)
        self._listed = inds[-1]

    def _learn_ready(self) -> None:
        """Learn the waiting results, except those that ended in the last ``margin`` seconds.

        A worker alone on its island has no peers whose results could be on their way: it learns all.
        """
        if self._period > 0:
            self._margin = min(max(self._margin, MARGIN * self._period), self._period / 2)
        ends = [r.evaltime for r in self._pending if math.isfinite(r.evaltime)]
        if self._island_size > 1 and self._margin > 0 and ends:
            newest = max(ends)
            self._learn_pending(keep=sum(1 for end in ends if end > newest - self._margin))
        else:
            self._learn_pending()

    def _learn_pending(self, keep: int = 0) -> None:
        """Learn the waiting results in the order their evaluations ended, all but the ``keep`` latest."""
        self._pending.sort(key=_order)
        ready = len(self._pending) - keep
        for result in self._pending[:ready]:
            self._learn(result)
        del self._pending[:ready]

    def _learn(self, result: _Result) -> None:
        par = self.par
        u = (result.position - self.center) / self.width
        y = (u - par.mean) / par.sigma  # Hansen 2016, eq. (38)
        first = par.generation == 0 and self._island_size > 1
        if result.tag is not None:
            generation, mean, sigma = result.tag
            own = (u - mean) / sigma  # the step in the distribution it was drawn from
            fresh = first or generation == par.generation
        else:
            own, fresh = y, first
        if fresh:
            point = u
        else:
            point = par.mean + par.sigma * self._clipped(y)  # Hansen 2011: injected
            own = self._clipped(own)
        self._losses.append(result.loss)
        self._points.append(point)
        self._steps.append(own)
        self._injected.append(result.tag is None)
        self._recent.append(result)
        if math.isfinite(result.evaltime):
            self._last = max(self._last, (result.evaltime, result.uid))
        if len(self._losses) >= par.lambda_:
            self._tell(
                np.array(self._losses),
                np.array(self._points),
                np.array(self._steps),
                np.array(self._injected),
            )
            self._losses.clear()
            self._points.clear()
            self._steps.clear()
            self._injected.clear()

    def _clipped(self, y: np.ndarray) -> np.ndarray:
        """``y`` shortened to the Mahalanobis length ``sqrt(n) + 2 n / (n + 2)`` (Hansen 2011)."""
        length = float(np.linalg.norm(self.par.inv_sqrt_times(y)))
        return y * (self._clip / length) if length > self._clip else y

    def _tell(self, losses: np.ndarray, points: np.ndarray, steps: np.ndarray, injected: np.ndarray) -> None:
        """One generation's update from ``lambda`` results in learning order.

        ``losses`` and ``injected`` have shape ``(lambda,)``; ``points`` (shape ``(lambda, n)``) are the
        results in the unit box, clipped where injected; ``steps`` (same shape) their steps in the
        distributions they were drawn from (from the current mean, clipped, for those without a tag:
        ``injected``, which get no negative weight, as in N. Hansen's ``pycma``).
        """
        par = self.par
        mu = par.mu
        order = np.argsort(losses, kind="stable")
        points, steps = points[order], steps[order]
        w_pos = par.weights[:mu]
        y_pos = steps[:mu]
        taught = ~injected[order][mu:]
        y_neg, w_neg = steps[mu:][taught], par.weights[mu:][taught]

        old_mean = par.mean
        par.mean = w_pos @ points[:mu]  # Hansen 2016, eq. (42) with c_m = 1
        if par.generation == 0 and self._island_size > 1:
            y_w = w_pos @ y_pos  # the workers started from different means: their steps
        else:
            y_w = (par.mean - old_mean) / par.sigma  # Hansen 2016, eq. (41)
        par.generation += 1

        c_sigma, c_c, c_1, c_mu = par.c_sigma, par.c_c, par.c_1, par.c_mu
        par.p_sigma = (1 - c_sigma) * par.p_sigma + math.sqrt(
            c_sigma * (2 - c_sigma) * par.mu_eff
        ) * par.inv_sqrt_times(y_w)  # Hansen 2016, eq. (43)
        norm_p_sigma = float(np.linalg.norm(par.p_sigma))
        old_sigma = par.sigma
        par.sigma *= math.exp(c_sigma / par.d_sigma * (norm_p_sigma / par.chi_n - 1))  # Hansen 2016, eq. (44)
        par.sigma = max(par.sigma, SIGMA_MIN)
        # The trends of the delay compensation (module docstring); they do not enter the update itself.
        par.drift = (1 - c_c / 2) * par.drift + c_c / 2 * y_w
        par.sigma_trend = (1 - c_sigma) * par.sigma_trend + c_sigma * math.log(par.sigma / old_sigma)
        # Stall the rank-one update while the step size is growing fast (Hansen 2016, p. 28, h_sigma).
        h_sigma = (
            norm_p_sigma / math.sqrt(1 - (1 - c_sigma) ** (2 * par.generation))
            < (1.4 + 2 / (par.n + 1)) * par.chi_n
        )
        par.p_c = (1 - c_c) * par.p_c + h_sigma * math.sqrt(c_c * (2 - c_c) * par.mu_eff) * y_w  # eq. (45)

        delta_h = (1 - h_sigma) * c_c * (2 - c_c)  # Hansen 2016, p. 28, delta(h_sigma)
        rank_mu = (y_pos.T * w_pos) @ y_pos
        weight_sum = float(np.sum(w_pos))
        if self.adapter.active and len(y_neg):
            # Negative weights are rescaled by n / ||C^(-1/2) y||^2, Hansen 2016, eq. (46).
            # A sample equal to the mean (a step below float resolution) has y = 0 and teaches nothing.
            squared = np.sum(par.inv_sqrt_times(y_neg) ** 2, axis=1)
            scale = np.divide(par.n, squared, out=np.zeros_like(squared), where=squared > 0)
            rank_mu += (y_neg.T * (w_neg * scale)) @ y_neg
            weight_sum += float(np.sum(w_neg))
        new_c = (  # Hansen 2016, eq. (47)
            (1 + c_1 * delta_h - c_1 - c_mu * weight_sum) * par.C
            + c_1 * np.outer(par.p_c, par.p_c)
            + c_mu * rank_mu
        )
        if np.all(np.isfinite(new_c)) and np.max(np.abs(new_c)) > C_MIN:
            par.C = new_c
        lazy_gap = 1 / (10 * par.n * (c_1 + c_mu))
        if self.decompose_in_each_generation or par.generation - par.eigen_generation >= lazy_gap:
            par.decompose()

    # ----------------------------------------------------------------------------------- checkpoint

    def state_dict(self) -> dict[str, Any]:  # noqa: D102
        return {
            "par": self.par.state_dict(),
            "losses": np.array(self._losses, dtype=np.float64),
            "points": np.array(self._points, dtype=np.float64).reshape(-1, self.par.n),
            "steps": np.array(self._steps, dtype=np.float64).reshape(-1, self.par.n),
            "injected": list(self._injected),
            "pending": [_plain(r) for r in self._pending],
            "last": self._last,
            "margin": self._margin,
            "period": self._period,
            "arrivals": self._arrivals,
            "np_rng": self.np_rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: D102
        if not state:
            return
        # What this worker observed before (the restored population) and the saved state had not learned.
        seen = list(self._recent) + self._pending
        self.par.load_state_dict(state["par"])
        self.np_rng.bit_generator.state = state["np_rng"]
        self._sampling = None
        if "pending" not in state:
            # Written before this design: the strategy and the generator only, the mean in [0, 1].
            self.par.mean = self.par.mean - 0.5
            return
        # A resumed island may be of another size, hence another lambda: keep the latest that fit.
        keep = self.par.lambda_ - 1
        self._losses = [float(v) for v in state["losses"]][-keep:]
        self._points = [np.array(v) for v in state["points"]][-keep:]
        self._steps = [np.array(v) for v in state["steps"]][-keep:]
        self._injected = [bool(v) for v in state["injected"]][-keep:]
        self._last = (float(state["last"][0]), int(state["last"][1]))
        self._margin = float(state["margin"])
        self._period = float(state["period"])
        self._arrivals = int(state["arrivals"])
        self._pending = [_Result(*fields) for fields in state["pending"]]
        known = {r.uid for r in self._pending}
        self._pending += [r for r in seen if (r.evaltime, r.uid) > self._last and r.uid not in known]
        self._recent.clear()

    def __repr__(self) -> str:
        return (
            f"CMAPropagator({type(self.adapter).__name__}(), n={self.par.n}, pop_size={self.par.lambda_}, "
            f"select_worst_all_time={self.select_worst_all_time})"
        )


_USABLE = (Status.COMPLETED, Status.PRUNED)


def _order(result: _Result) -> tuple[float, int, int]:
    """Return the key of the learning order: when the evaluation ended (first if unknown), uid, arrival."""
    evaltime = result.evaltime if math.isfinite(result.evaltime) else -math.inf
    return (evaltime, result.uid, result.arrival)


def _plain(result: _Result) -> tuple[Any, ...]:
    """Return a waiting result as plain values for the checkpoint (copies of the arrays)."""
    tag = None if result.tag is None else (result.tag[0], result.tag[1].copy(), result.tag[2])
    return (*result[:4], result.position.copy(), tag)


def _numpy_generator(rng: random.Random | int | np.random.Generator | None) -> np.random.Generator:
    """Return a generator of this propagator's own, seeded from ``rng`` without advancing anything global."""
    if isinstance(rng, random.Random):
        return np.random.default_rng(rng.getrandbits(128))
    if isinstance(rng, np.random.Generator):
        return np.random.default_rng(rng.integers(2**63))
    if rng is None or isinstance(rng, int):
        return np.random.default_rng(rng)
    raise ValueError(f"rng: expected random.Random, an int seed or numpy.random.Generator, got {rng!r}")
