"""Covariance matrix adaptation evolution strategy (CMA-ES), asynchronous.

The strategy follows N. Hansen, "The CMA Evolution Strategy: A Tutorial", arXiv:1604.00772 (2016); equation
numbers below refer to it. The active covariance update (negative weights for the worst individuals) is the
one of G. A. Jastrebski and D. V. Arnold, "Improving Evolution Strategies through Active Covariance Matrix
Adaptation", IEEE CEC 2006, in the form of Hansen 2016, Sec. 3.6 and eqs. (46)-(53).

The strategy works in the unit box: each parameter ``x`` with limits ``(low, high)`` is searched as
``(x - low) / (high - low)`` in [0, 1], so one step size fits all parameters at the start. Every worker
keeps its own strategy state. On each call the propagator collects the evaluated individuals it has not used
yet, wherever they were bred; once at least ``lambda`` of them exist it performs one generation's update with
all of them, then samples one offspring from the (possibly updated) distribution.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..individual import Individual, Status, loss_order
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

    _STATE = ("mean", "sigma", "C", "B", "D", "p_sigma", "p_c", "generation", "eigen_generation")

    def state_dict(self) -> dict[str, Any]:
        """Return copies of the changing state (the learning rates follow from ``n`` and ``lambda_``)."""
        state = {key: getattr(self, key) for key in self._STATE}
        return {key: value.copy() if isinstance(value, np.ndarray) else value for key, value in state.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        for key in self._STATE:
            value = state[key]
            setattr(self, key, np.array(value, dtype=np.float64) if isinstance(value, np.ndarray) else value)


class CMAPropagator(Propagator):
    """Asynchronous CMA-ES: sample one offspring from the learned normal distribution per call.

    Each call takes the evaluated individuals (all active ones of the island, see :attr:`breeding_pool`) it
    has not used yet. Once at least ``pop_size`` of them exist, they form one generation: they are ranked by
    loss, the ``mu = pop_size // 2`` best move the mean (Hansen 2016, eqs. (41)-(42)), the step size and the
    paths follow (eqs. (43)-(45)) and the covariance matrix learns (eqs. (46)-(47)). Individuals are told
    apart by ``uid``; those without one (``uid < 0``, bred by hand) by identity.

    The offspring is ``x = m + sigma * B D z`` with ``z ~ N(0, I)`` (Hansen 2016, eqs. (38)-(40)) in the unit
    box of the search space, i.e. drawn from ``N(m, sigma**2 C)`` with the learned covariance ``C``.
    Boundary rule: a sample outside the box is drawn again, up to ``MAX_RESAMPLES`` (10) times; if all fall
    outside, the last one is mirrored at the box faces (``x -> -x`` below 0, ``x -> 2 - x`` above 1,
    repeatedly). Offspring therefore always lie inside ``limits``. The update uses the offspring as they
    are, after repair.

    The initial mean is uniform in the box (from this propagator's generator), the initial step size 0.3.

    Parameters
    ----------
    adapter : CMAAdapter
        :class:`BasicCMA` or :class:`ActiveCMA`.
    limits : dict or SearchSpace
        The search space; only float parameters ``(low, high)``.
    decompose_in_each_generation : bool
        Decompose ``C`` after every update; otherwise only once per ``1 / (10 n (c_1 + c_mu))``
        generations (Hansen 2016, Sec. B.2), in between sampling with the last ``B`` and ``D``.
    select_worst_all_time : bool
        For :class:`ActiveCMA`: give the negative weights to the worst ``pop_size - mu`` individuals of all
        given ones (all time) instead of the worst of the current generation. No effect for
        :class:`BasicCMA`.
    pop_size : int >= 2, optional
        ``lambda``, the individuals per generation; ``4 + floor(3 ln n)`` by default (Hansen 2016, eq. (48)).
    pool_size : int >= 1
        Accepted for compatibility with Propulate 1.2.2, where the ``mu`` parents were drawn at random from
        the ``pool_size * mu`` best individuals. This propagator ranks whole generations instead, so it does
        not use it.
    rng : random.Random or int or numpy.random.Generator, optional
        Seeds this propagator's own ``numpy.random.Generator``; OS entropy if not given. The global random
        states are never used.

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
            raise ValueError(f"limits: CMA-ES supports float parameters (low, high) only, not {others}")
        n = self.space.ndim
        lambda_ = 4 + int(3 * math.log(n)) if pop_size is None else check_int("pop_size", pop_size, 2)
        self.pool_size = check_int("pool_size", pool_size, 1)
        self.adapter = adapter
        self.decompose_in_each_generation = bool(decompose_in_each_generation)
        self.select_worst_all_time = bool(select_worst_all_time)
        self.np_rng = _numpy_generator(rng)
        self.width = np.where(self.space.upper > self.space.lower, self.space.upper - self.space.lower, 1.0)
        self.par = CMAParameter(n, lambda_, self.np_rng.uniform(size=n), SIGMA0, adapter)
        self._used: set[int] = set()

    # ------------------------------------------------------------------------------------------ ask

    def __call__(self, inds: list[Individual]) -> list[Individual]:  # noqa: D102
        fresh = [ind for ind in inds if _key(ind) not in self._used and ind.status not in _UNUSABLE]
        if len(fresh) >= self.par.lambda_:
            self._used.update(_key(ind) for ind in fresh)
            usable = [ind for ind in inds if ind.status not in _UNUSABLE]
            self._tell(sorted(fresh, key=loss_order), sorted(usable, key=loss_order))
        return [Individual(self._sample(), self.space)]

    def _sample(self) -> np.ndarray:
        par = self.par
        for _ in range(MAX_RESAMPLES):
            z = self.np_rng.standard_normal(par.n)
            x = par.mean + par.sigma * (par.B @ (par.D * z))  # Hansen 2016, eqs. (38)-(40)
            if np.all((x >= 0.0) & (x <= 1.0)):
                break
        else:
            x = np.mod(x, 2.0)
            x = np.where(x > 1.0, 2.0 - x, x)  # mirrored at the faces of the box
        return np.clip(self.space.lower + x * self.width, self.space.lower, self.space.upper)

    # ----------------------------------------------------------------------------------------- tell

    def _unit(self, inds: list[Individual]) -> np.ndarray:
        return (np.array([ind.position for ind in inds]) - self.space.lower) / self.width

    def _tell(self, ranked: list[Individual], all_ranked: list[Individual]) -> None:
        """One generation's update from ``ranked`` (best first); ``all_ranked`` is every known individual."""
        par = self.par
        mu = par.mu
        n_neg = par.lambda_ - mu
        w_pos, w_neg = par.weights[:mu], par.weights[mu:]
        y_pos = (self._unit(ranked[:mu]) - par.mean) / par.sigma  # Hansen 2016, eq. (38)
        best = {id(ind) for ind in ranked[:mu]}
        pool = [ind for ind in (all_ranked if self.select_worst_all_time else ranked) if id(ind) not in best]
        worst = pool[len(pool) - n_neg :]
        y_neg = (self._unit(worst) - par.mean) / par.sigma if self.adapter.active and worst else None

        y_w = w_pos @ y_pos  # Hansen 2016, eq. (41)
        par.mean = par.mean + par.sigma * y_w  # Hansen 2016, eq. (42), c_m = 1
        par.generation += 1

        c_sigma, c_c, c_1, c_mu = par.c_sigma, par.c_c, par.c_1, par.c_mu
        par.p_sigma = (1 - c_sigma) * par.p_sigma + math.sqrt(
            c_sigma * (2 - c_sigma) * par.mu_eff
        ) * par.inv_sqrt_times(y_w)  # Hansen 2016, eq. (43)
        norm_p_sigma = float(np.linalg.norm(par.p_sigma))
        par.sigma *= math.exp(c_sigma / par.d_sigma * (norm_p_sigma / par.chi_n - 1))  # Hansen 2016, eq. (44)
        par.sigma = max(par.sigma, SIGMA_MIN)
        # Stall the rank-one update while the step size is growing fast (Hansen 2016, p. 28, h_sigma).
        h_sigma = (
            norm_p_sigma / math.sqrt(1 - (1 - c_sigma) ** (2 * par.generation))
            < (1.4 + 2 / (par.n + 1)) * par.chi_n
        )
        par.p_c = (1 - c_c) * par.p_c + h_sigma * math.sqrt(c_c * (2 - c_c) * par.mu_eff) * y_w  # eq. (45)

        delta_h = (1 - h_sigma) * c_c * (2 - c_c)  # Hansen 2016, p. 28, delta(h_sigma)
        rank_mu = (y_pos.T * w_pos) @ y_pos
        weight_sum = float(np.sum(w_pos))
        if y_neg is not None:
            # Negative weights are rescaled by n / ||C^(-1/2) y||^2, Hansen 2016, eq. (46).
            # A sample equal to the mean (a step below float resolution) has y = 0 and teaches nothing.
            squared = np.sum(par.inv_sqrt_times(y_neg) ** 2, axis=1)
            scale = np.divide(par.n, squared, out=np.zeros_like(squared), where=squared > 0)
            w_circ = w_neg[-len(y_neg) :] * scale
            rank_mu += (y_neg.T * w_circ) @ y_neg
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
            "used": sorted(self._used),
            "np_rng": self.np_rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:  # noqa: D102
        if not state:
            return
        self.par.load_state_dict(state["par"])
        self._used = set(state["used"])
        self.np_rng.bit_generator.state = state["np_rng"]

    def __repr__(self) -> str:
        return (
            f"CMAPropagator({type(self.adapter).__name__}(), n={self.par.n}, pop_size={self.par.lambda_}, "
            f"select_worst_all_time={self.select_worst_all_time})"
        )


_UNUSABLE = (Status.FAILED, Status.INTERRUPTED, Status.PENDING)


def _key(ind: Individual) -> int:
    return ind.uid if ind.uid >= 0 else id(ind)


def _numpy_generator(rng: random.Random | int | np.random.Generator | None) -> np.random.Generator:
    """Return a generator of this propagator's own, seeded from ``rng`` without advancing anything global."""
    if isinstance(rng, random.Random):
        return np.random.default_rng(rng.getrandbits(128))
    if isinstance(rng, np.random.Generator):
        return np.random.default_rng(rng.integers(2**63))
    if rng is None or isinstance(rng, int):
        return np.random.default_rng(rng)
    raise ValueError(f"rng: expected random.Random, an int seed or numpy.random.Generator, got {rng!r}")
