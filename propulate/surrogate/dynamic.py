"""Dynamic surrogate: a Gaussian process predicts the final loss from the parameters and the partial curve."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..space import SearchSpace
from ..validation import check_int, check_real
from .base import Run, Surrogate

if TYPE_CHECKING:
    from ..individual import Individual

__all__ = ["DynamicSurrogate"]

# A completed run as the training set keeps it: (generation, worker rank, position, curve, final loss).
# Sorting these tuples orders runs from oldest to most recent.
_Entry = tuple[int, int, tuple[float, ...], tuple[float, ...], float]


class DynamicSurrogate(Surrogate):
    """Cancel a run when a Gaussian process is confident that its final loss will not beat the best one.

    Training data: every kept completed run contributes up to ``steps_per_run`` rows (evenly spaced steps of
    its curve, the last included) with the features

    - its position, each slot scaled to [0, 1] by the search space's bounds (one-hot slots as they are),
    - the step index divided by the longest kept curve's last step index,
    - the interim loss at that step, standardized over the training rows,

    and as the target the change still to come, final loss minus interim loss. The predicted final loss is
    the interim loss plus the predicted change: far from the training data the prediction falls back to
    "the usual change from here" with a wide uncertainty, instead of to the average final loss, so a run
    whose interim losses are far above anything seen is still recognized as bad. The regression is
    scikit-learn's ``GaussianProcessRegressor`` with a constant times an anisotropic RBF kernel plus white
    noise, targets normalized, fitted lazily at the first :meth:`cancel` after the training set changed
    (Rasmussen & Williams, "Gaussian Processes for Machine Learning", MIT Press 2006, ch. 2 and 5). A fit
    costs up to the cube of the number of rows; at the default bound it takes about a second on one core.

    At step ``k`` with interim loss ``loss_k`` the run is cancelled when the lower confidence bound of its
    predicted final loss, ``mean - kappa * std``, is above the lowest final loss of the kept runs: even an
    optimistic guess does not beat the best run. Nothing is cancelled while fewer than ``min_runs``
    completed runs are known, except that a NaN or infinite interim loss always cancels (the training
    diverged). Pruned and failed runs are not learned from (they have no final loss).

    The training set is bounded by ``max_runs`` completed runs: the ``ceil(max_runs / 2)`` with the lowest
    final losses and, of the others, the most recent by (generation, worker rank). The kept set depends
    only on which runs were seen, not on the order they arrived in, so merging commutes and a surrogate
    rebuilt from the island's records decides alike.

    Parameters
    ----------
    limits : dict or SearchSpace
        The search space of the individuals passed to :meth:`start_run`.
    min_runs : int >= 1
        Completed runs needed before anything is cancelled; at most ``max_runs``.
    max_runs : int >= 1
        Completed runs kept for training.
    steps_per_run : int >= 1
        Rows per run in the training set, so at most ``max_runs * steps_per_run`` rows (128 by default).
    kappa : float >= 0
        Width of the confidence bound in standard deviations; larger cancels less.

    Raises
    ------
    ValueError
        If an argument is outside its range.
    ImportError
        If scikit-learn is not installed (``pip install "propulate[surrogate]"``).
    """

    def __init__(
        self,
        limits: Mapping[str, Any] | SearchSpace,
        min_runs: int = 5,
        max_runs: int = 32,
        steps_per_run: int = 4,
        kappa: float = 2.0,
    ) -> None:
        self.space = SearchSpace.of(limits)
        self.max_runs = check_int("max_runs", max_runs, 1)
        self.min_runs = check_int("min_runs", min_runs, 1, f"an int in [1, max_runs={max_runs}]")
        if self.min_runs > self.max_runs:
            raise ValueError(f"min_runs: expected an int in [1, max_runs={max_runs}], got {min_runs!r}")
        self.steps_per_run = check_int("steps_per_run", steps_per_run, 1)
        self.kappa = check_real("kappa", kappa, 0.0)
        self._fit_regressor = _gaussian_process_fitter()
        width = self.space.upper - self.space.lower
        # Fixed ranges such as (7, 7) have zero width; their slot is constant and maps to 0.
        self._scale = np.divide(1.0, width, out=np.zeros_like(width), where=width > 0)
        self._run = Run()
        self._position = np.zeros(self.space.ndim)
        self._generation = -1
        self._rank = -1
        # The completed runs kept for training.
        self._kept: set[_Entry] = set()
        # The fitted model and the feature scaling it was fitted with; None when the kept runs changed.
        self._model: tuple[Any, float, float, float] | None = None

    def start_run(self, ind: Individual) -> None:  # noqa: D102
        position = np.asarray(ind.position, dtype=np.float64)
        if position.shape != (self.space.ndim,):
            raise ValueError(
                f"ind: expected a position of shape ({self.space.ndim},) in this surrogate's search space, "
                f"got {position.shape}"
            )
        self._run = Run()
        self._position = position
        self._generation = int(ind.generation)
        self._rank = int(ind.rank)

    def replay(self, loss: float) -> None:  # noqa: D102
        self._run.observe(loss)

    def cancel(self, loss: float) -> bool:  # noqa: D102
        step = self._run.observe(loss)
        if not math.isfinite(loss):
            stop = True
        elif len(self._kept) < self.min_runs:
            stop = False
        else:
            mean, std = self.predict(step, loss)
            stop = mean - self.kappa * std > min(entry[4] for entry in self._kept)
        self._run.pruned |= stop
        return stop

    def predict(self, step: int, loss: float) -> tuple[float, float]:
        """Predict the final loss of the current run from its interim ``loss`` at ``step``.

        Parameters
        ----------
        step : int >= 0
            The step index of the interim loss (0 for the first one).
        loss : float
            The finite interim loss at that step.

        Returns
        -------
        tuple of float
            Mean and standard deviation of the predicted final loss.

        Raises
        ------
        ValueError
            If no completed run is known yet.
        """
        if not self._kept:
            raise ValueError("predict: no completed run is known yet")
        if self._model is None:
            self._model = self._fit()
        model, last_step, loss_mean, loss_std = self._model
        features = self._features(self._position, step / last_step, (loss - loss_mean) / loss_std)
        change, std = model.predict(features[np.newaxis, :], return_std=True)
        return loss + float(change[0]), float(std[0])

    def update(self, loss: float) -> None:  # noqa: D102
        self._run.finish(loss)
        if self._run.completed:
            assert self._run.loss is not None
            position = tuple(self._position.tolist())
            self._keep((self._generation, self._rank, position, tuple(self._run.curve), self._run.loss))

    def data(self) -> dict[str, Any]:
        """Return the latest run.

        Returns
        -------
        dict
            ``{"curve": [...], "loss": final loss or None, "pruned": bool, "position": [...],
            "generation": int, "rank": int}``.
        """
        return {
            **self._run.to_data(),
            "position": self._position.tolist(),
            "generation": self._generation,
            "rank": self._rank,
        }

    def merge(self, data: Any) -> None:  # noqa: D102
        if data is None:
            return
        run = Run.from_data(data)
        if not run.completed:
            return
        assert run.loss is not None
        try:
            position = tuple(float(x) for x in data["position"])
            generation, rank = int(data["generation"]), int(data["rank"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"data: expected 'position', 'generation' and 'rank' as made by data(), got {data!r}"
            ) from None
        if len(position) != self.space.ndim:
            raise ValueError(
                f"data: a position of {len(position)} slots does not fit this search space of "
                f"{self.space.ndim} slots"
            )
        self._keep((generation, rank, position, tuple(run.curve), run.loss))

    def _keep(self, entry: _Entry) -> None:
        """Add a completed run to the training set and drop runs beyond ``max_runs``."""
        # A run seen twice is kept once; a run without interim losses has nothing to learn from.
        if entry in self._kept or not entry[3]:
            return
        self._kept.add(entry)
        self._model = None
        if len(self._kept) <= self.max_runs:
            return
        by_loss = sorted(self._kept, key=lambda e: (e[4], e))
        n_best = (self.max_runs + 1) // 2
        recent = sorted(by_loss[n_best:], reverse=True)[: self.max_runs - n_best]
        self._kept = set(by_loss[:n_best] + recent)

    def _features(self, position: np.ndarray | tuple[float, ...], step: float, loss: float) -> np.ndarray:
        scaled = (np.asarray(position) - self.space.lower) * self._scale
        return np.concatenate([scaled, [step, loss]])

    def _fit(self) -> tuple[Any, float, float, float]:
        """Fit the Gaussian process to the kept runs (in a fixed order, so equal sets give equal fits)."""
        runs = sorted(self._kept)
        last_step = max(1, max(len(entry[3]) for entry in runs) - 1)
        rows, targets = [], []
        for _, _, position, curve, final in runs:
            steps = np.unique(np.linspace(0, len(curve) - 1, min(len(curve), self.steps_per_run)).round())
            for k in steps.astype(int):
                rows.append((position, k / last_step, curve[k]))
                targets.append(final - curve[k])
        interim = np.array([row[2] for row in rows])
        loss_mean = float(interim.mean())
        loss_std = float(interim.std()) or 1.0
        features = np.array([self._features(p, s, (x - loss_mean) / loss_std) for p, s, x in rows])
        model = self._fit_regressor(features, np.array(targets))
        return model, float(last_step), loss_mean, loss_std


def _gaussian_process_fitter() -> Callable[[np.ndarray, np.ndarray], Any]:
    """Return a function that fits a Gaussian process to features ``(n_rows, n_features)`` and targets.

    Raises
    ------
    ImportError
        If scikit-learn is not installed.
    """
    try:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
        from threadpoolctl import threadpool_limits
    except ImportError as error:
        raise ImportError(
            "DynamicSurrogate needs scikit-learn for its Gaussian-process regression, an optional dependency "
            'of propulate (Propulate 1.2.2 required GPy instead): pip install "propulate[surrogate]"'
        ) from error

    def fit(features: np.ndarray, targets: np.ndarray) -> Any:
        length_scales = RBF(np.ones(features.shape[1]), (1e-2, 1e2))
        kernel = ConstantKernel(1.0, (1e-3, 1e3)) * length_scales + WhiteKernel(1e-2, (1e-6, 1.0))
        # No optimizer restarts: the fit is deterministic and needs no random state.
        model = GaussianProcessRegressor(kernel, normalize_y=True)
        # One BLAS thread: the matrices are small, and the worker's cores belong to the training.
        with warnings.catch_warnings(), threadpool_limits(1):
            # Hyperparameters at a bound of their range are expected with few runs; the fit is still usable.
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(features, targets)
        return model

    return fit
