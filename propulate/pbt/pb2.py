"""Population-based bandits (PB2): population-based training whose explore step is a GP bandit.

Parker-Holder, Nguyen and Roberts, "Provably Efficient Online Hyperparameter Optimization with
Population-Based Bandits", NeurIPS 2020, arXiv:2002.02518. Exploit is population-based training's
(:mod:`propulate.pbt.exploit`): a member in the bottom quantile copies the state of a member of the top
one. What it trains next is no random perturbation of the donor's configuration: PB2 treats choosing the
continuous hyperparameters of an interval as a bandit problem whose reward drifts as the networks train,
fits a Gaussian process to the improvements the island's intervals achieved, and picks the configuration
with the highest upper confidence bound at the current time. With few members a random perturbation
explores the space slowly; the bandit uses every interval the population trained to aim the next one.

Data. Every completed interval of a member of the island whose starting state is known gives one point:
``x = (t, h)`` with ``t`` the step the interval ended at and ``h`` its configuration, and the reward
``y = (loss(parent) - loss) / steps``, the improvement per step over the state it started from (the paper's
change of the reward over the interval; for an interval that exploited, the donor's state is where it
started). Only the ``max_data`` most recent intervals (by the step they ended at) are kept, so a fit costs
a few tens of milliseconds. ``t`` is scaled to [0, 1] over the kept intervals and the time the new interval
will end at (which is 1); each numeric parameter to [0, 1] over its range, a log-scale one in its
logarithm, an integer or stepped one as a continuous value read back onto its grid; ``y`` is standardized.

Model. The paper's time-varying kernel (section 4, after Bogunovic et al. 2016) is
``k((t, h), (t', h')) = (1 - ε)^(|t - t'| / 2) k_SE(h, h')``: observations lose their weight on the present
as they age. Its time factor is ``exp(-|t - t'| / l_t)`` with ``l_t = -2 / ln(1 - ε)``, a Matérn kernel of
smoothness 1/2 in ``t``; the model here is that product with ``l_t`` learned instead of ``ε``, an RBF
kernel with one length scale per parameter over ``h``, a constant amplitude and a white-noise term,
fitted by maximum likelihood (scikit-learn's ``GaussianProcessRegressor``, one seeded optimizer restart).

Acquisition. Upper confidence bound at the time ``t = 1`` of the new interval's end,
``UCB(h) = μ(1, h) + sqrt(β_T) σ(1, h)``, with the GP-UCB schedule
``β_T = 2 ln(T^(d/2 + 2) π² / (3δ))`` (Srinivas et al. 2010, Theorem 2 without its unknown constants, as
in Brochu, Cora and de Freitas 2010), ``T`` the index of the new interval and ``d`` the number of numeric
parameters; or a constant ``sqrt(β) = kappa``. It is maximized over ``[0, 1]^d`` from ``candidates``
random points, the donor's configuration and the kept intervals' ones, the best refined by L-BFGS-B inside
the box. Intervals of other members under way (:meth:`PB2.pending`) enter the model as points at ``t = 1``
whose reward is the model's mean there ("kriging believer"): the mean stays, the uncertainty near them
shrinks, so two members that exploit at once are sent to different places (the paper's batch setting,
after Desautels et al. 2014).

Not a bandit. Categorical parameters are explored as population-based training explores them (resampled
or moved to a neighbouring choice; the paper's PB2 handles continuous parameters only), and so is every
parameter while fewer than ``max(2, d + 1)`` intervals are known (the GP has fewer points than inputs).
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..individual import Individual, Status
from ..space import Kind, SearchSpace
from ..validation import check_int, check_real
from .explore import explore
from .lineage import MEMBER, PARENT, START, UNTIL, migrant
from .propagator import PopulationBasedTraining

__all__ = ["PB2", "beta"]

# A GP fit: features (n, 1 + d), rewards (n,), a seed, and the kernel to keep (or None) -> a regressor.
Fit = Callable[[np.ndarray, np.ndarray, int, Any], Any]


def beta(interval: int, dims: int, delta: float) -> float:
    """Return the GP-UCB exploration weight ``β_T = 2 ln(T^(d/2 + 2) π² / (3δ))`` for ``T = interval``.

    Srinivas, Krause, Kakade and Seeger, "Gaussian Process Optimization in the Bandit Setting", ICML 2010,
    Theorem 2, with its problem constants left out (Brochu, Cora and de Freitas, arXiv:1012.2599, 2010).

    Parameters
    ----------
    interval : int >= 1
        ``T``: the index of the interval being chosen (values below 1 count as 1).
    dims : int >= 1
        ``d``: the number of parameters the bandit chooses.
    delta : float in (0, 1)
        The confidence parameter: the bound holds with probability ``1 - δ``.
    """
    t = max(int(interval), 1)
    return 2.0 * ((dims / 2.0 + 2.0) * math.log(t) + math.log(math.pi**2 / (3.0 * delta)))


class PB2(PopulationBasedTraining):
    """Population-based bandits: PBT's exploit, then a GP-UCB choice of the numeric parameters.

    Parker-Holder, Nguyen and Roberts, NeurIPS 2020 (arXiv:2002.02518); the module docstring states the
    model, the acquisition and what is explored as in population-based training. Used as
    :class:`PopulationBasedTraining` is, with the same arguments and these:

    Parameters
    ----------
    limits, rng, perturbation_interval, burn_in_period, quantile_fraction, resample_probability, \
perturbation_factors, keep_states
        As :class:`PopulationBasedTraining`; ``resample_probability`` and ``perturbation_factors`` explore
        the categorical parameters, and every parameter while the bandit has too few data.
    kappa : float >= 0, optional
        A constant width ``sqrt(β)`` of the confidence bound, in standard deviations of the normalized
        reward; ``None`` (the default) follows the schedule :func:`beta`.
    delta : float in (0, 1)
        The confidence parameter of the schedule (ignored with ``kappa``).
    max_data : int >= 2
        Completed intervals the GP is fitted to, the most recent ones: a fit costs ``O(max_data³)``.
    candidates : int >= 1
        Random points the acquisition is evaluated at before the best is refined.

    Raises
    ------
    ValueError
        For an argument out of range (named in the message), or limits that are not a search space.
    TypeError
        If ``rng`` is not a ``random.Random``.
    ImportError
        If scikit-learn is not installed (``pip install "propulate[surrogate]"``).
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        rng: random.Random | None = None,
        perturbation_interval: int = 1,
        burn_in_period: int = 0,
        quantile_fraction: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: Sequence[float] = (1.2, 0.8),
        keep_states: int = 3,
        kappa: float | None = None,
        delta: float = 0.1,
        max_data: int = 64,
        candidates: int = 256,
    ) -> None:
        super().__init__(
            limits,
            rng,
            perturbation_interval,
            burn_in_period,
            quantile_fraction,
            resample_probability,
            perturbation_factors,
            keep_states,
        )
        self.kappa = None if kappa is None else check_real("kappa", kappa, 0.0)
        self.delta = check_real("delta", delta)
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta: expected a number in (0, 1), got {delta!r}")
        self.max_data = check_int("max_data", max_data, 2)
        self.candidates = check_int("candidates", candidates, 1)
        # The numeric parameters the bandit chooses (a fixed range such as (7, 7) has nothing to choose).
        self.numeric = [
            p for p in self.space.parameters if p.kind is not Kind.CATEGORICAL and p.upper > p.lower
        ]
        self._fit = _gaussian_process_fitter()
        # The configurations the island's other workers train now, scaled to [0, 1]: (n_pending, d).
        self._pending = np.zeros((0, len(self.numeric)))

    @property
    def min_data(self) -> int:
        """Intervals needed before the bandit chooses: ``max(2, d + 1)``, ``d`` numeric parameters."""
        return max(2, len(self.numeric) + 1)

    def pending(self, positions: np.ndarray) -> None:
        """Note the configurations of the intervals the island's other workers train now.

        Parameters
        ----------
        positions : numpy.ndarray
            Shape ``(n_pending, ndim)``: positions of the search space (:meth:`Propagator.pending`).
        """
        positions = np.asarray(positions, dtype=np.float64)
        if positions.ndim != 2 or positions.shape[1] != self.space.ndim:
            self._pending = np.zeros((0, len(self.numeric)))
            return
        self._pending = self._scale(positions)

    def explored(self, source: Individual, intervals: list[Individual], interval: int) -> dict[str, Any]:
        """Return the next configuration after an exploit of ``source``: GP-UCB's choice (module docstring).

        The categorical parameters, and every parameter while fewer than :attr:`min_data` intervals are
        known, are explored as :class:`PopulationBasedTraining` explores them. Parameters as
        :meth:`PopulationBasedTraining.explored`.
        """
        params = explore(
            source.params(), self.space, self.rng, self.resample_probability, self.perturbation_factors
        )
        if not self.numeric:
            return params
        until = int(source.extras[UNTIL]) + self.perturbation_interval
        data = self.data(intervals, until)
        if data is None:
            return params
        features, rewards = data
        h = self.choose(features, rewards, self._scale(source.position[np.newaxis, :])[0], interval)
        for p, u in zip(self.numeric, h, strict=True):
            params[p.name] = p.value(p.lower + float(u) * (p.upper - p.lower))
        return params

    def data(self, intervals: Sequence[Individual], until: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Return the bandit's data from the island's ``intervals`` for an interval ending at step ``until``.

        Returns
        -------
        tuple of numpy.ndarray or None
            Features of shape ``(n, 1 + d)``: per kept interval the scaled time of its end (``until`` is 1)
            and its scaled numeric parameters, each in [0, 1]; and rewards of shape ``(n,)``: the
            improvement per step (module docstring). ``None`` with fewer than :attr:`min_data` intervals.
        """
        completed = {
            ind.uid: ind for ind in intervals if ind.status is Status.COMPLETED and math.isfinite(ind.loss)
        }
        rows = []
        for ind in completed.values():
            extras = ind.extras
            if MEMBER not in extras or migrant(ind):
                continue
            parent = completed.get(extras[PARENT], None) if extras[PARENT] >= 0 else None
            steps = extras[UNTIL] - extras[START]
            if parent is None or steps <= 0:
                continue
            rows.append((extras[UNTIL], ind.uid, ind, (parent.loss - ind.loss) / steps))
        rows.sort(key=lambda row: (row[0], row[1]))
        rows = rows[-self.max_data :]
        if len(rows) < self.min_data:
            return None
        first = rows[0][0]
        span = max(until - first, 1)
        times = np.array([(row[0] - first) / span for row in rows])
        h = self._scale(np.array([row[2].position for row in rows]))
        return np.column_stack([times, h]), np.array([row[3] for row in rows])

    def choose(
        self, features: np.ndarray, rewards: np.ndarray, start: np.ndarray, interval: int
    ) -> np.ndarray:
        """Return the scaled configuration, shape ``(d,)`` in ``[0, 1]``, of highest UCB at time 1.

        Parameters
        ----------
        features, rewards : numpy.ndarray
            The bandit's data (:meth:`data`).
        start : numpy.ndarray
            Shape ``(d,)``: the donor's scaled configuration, one of the points tried.
        interval : int
            The index of the new interval (``T`` of :func:`beta`).
        """
        from scipy.optimize import minimize

        seed = self.rng.getrandbits(32)
        model = self._fit(features, rewards, seed, None)
        if len(self._pending):
            # Kriging believer: the pending intervals' rewards are what the model expects there.
            believed = np.column_stack([np.ones(len(self._pending)), self._pending])
            more, expected = (
                np.vstack([features, believed]),
                np.concatenate([rewards, model.predict(believed)]),
            )
            model = self._fit(more, expected, seed, model.kernel_)
        d = features.shape[1] - 1
        width = self.kappa if self.kappa is not None else math.sqrt(beta(interval, d, self.delta))

        def ucb(h: np.ndarray) -> np.ndarray:
            x = np.column_stack([np.ones(len(h)), h])
            mean, std = model.predict(x, return_std=True)
            return mean + width * std

        draws = np.random.default_rng(seed).random((self.candidates, d))
        points = np.vstack([draws, start[np.newaxis, :], features[:, 1:]])
        best = points[int(np.argmax(ucb(points)))]
        refined = minimize(
            lambda h: -float(ucb(h[np.newaxis, :])[0]), best, method="L-BFGS-B", bounds=[(0.0, 1.0)] * d
        )
        if refined.success and -refined.fun > ucb(best[np.newaxis, :])[0]:
            best = refined.x
        return np.clip(best, 0.0, 1.0)

    def _scale(self, positions: np.ndarray) -> np.ndarray:
        """Return the numeric slots of ``positions`` (shape ``(n, ndim)``) scaled to [0, 1]: ``(n, d)``."""
        lower = np.array([p.lower for p in self.numeric])
        upper = np.array([p.upper for p in self.numeric])
        slots = positions[:, [p.offset for p in self.numeric]]
        return np.clip((slots - lower) / (upper - lower), 0.0, 1.0)

    def __repr__(self) -> str:
        return (
            f"PB2(perturbation_interval={self.perturbation_interval}, "
            f"burn_in_period={self.burn_in_period}, quantile_fraction={self.quantile_fraction}, "
            f"resample_probability={self.resample_probability}, "
            f"perturbation_factors={self.perturbation_factors}, keep_states={self.states.keep_states}, "
            f"kappa={self.kappa}, delta={self.delta}, max_data={self.max_data}, candidates={self.candidates})"
        )


def _gaussian_process_fitter() -> Fit:
    """Return a function that fits the time-varying GP to features ``(n, 1 + d)`` and rewards ``(n,)``.

    Its third argument seeds the optimizer's restart; a fitted kernel as the fourth is kept as it is (the
    model is conditioned on the data without refitting).

    Raises
    ------
    ImportError
        If scikit-learn is not installed.
    """
    try:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel
        from threadpoolctl import threadpool_limits
    except ImportError as error:
        raise ImportError(
            "PB2 needs scikit-learn for its Gaussian-process bandit, an optional dependency of propulate: "
            'pip install "propulate[surrogate]"'
        ) from error

    # A length scale this long makes a kernel ignore that input: the product acts on t and h separately.
    off = 1e5

    def kernel(n_inputs: int) -> Any:
        d = n_inputs - 1
        time = Matern(
            [1.0] + [off] * d, np.array([[1e-2, 1e2]] + [[off, off]] * d), nu=0.5
        )  # (1 - ε)^(|t - t'| / 2)
        params = RBF([off] + [0.3] * d, np.array([[off, off]] + [[1e-2, 1e2]] * d))
        return ConstantKernel(1.0, (1e-3, 1e3)) * time * params + WhiteKernel(1e-2, (1e-6, 1.0))

    def fit(features: np.ndarray, rewards: np.ndarray, seed: int, fitted: Any) -> Any:
        if fitted is not None:
            model = GaussianProcessRegressor(fitted, optimizer=None, normalize_y=True)
        else:
            model = GaussianProcessRegressor(
                kernel(features.shape[1]), normalize_y=True, n_restarts_optimizer=1, random_state=seed
            )
        # One BLAS thread: the matrices are small, and the worker's cores belong to the training.
        with warnings.catch_warnings(), threadpool_limits(1):
            # Hyperparameters at a bound of their range are expected with few data; the fit is still usable.
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(features, rewards)
        return model

    return fit
