"""Static surrogate: compare each interim loss with the learning curve of the best completed run."""

from __future__ import annotations

from .base import CurveSurrogate, Run, check_margin, exceeds

__all__ = ["StaticSurrogate"]


class StaticSurrogate(CurveSurrogate):
    """Cancel a run whose interim loss falls too far behind the best completed run at the same step.

    The baseline is the learning curve (the interim losses) of the completed run with the lowest final loss
    that this worker evaluated or merged; pruned and failed runs never become the baseline, nor do runs that
    reported no interim loss. At step ``k`` the run is cancelled when its interim loss ``loss_k`` exceeds
    ``b_k + (1 / margin - 1) * |b_k|``, where ``b_k`` is the baseline's ``k``-th value, or its last value for
    steps beyond the baseline's length. Without a baseline nothing is cancelled, except that a NaN or
    infinite interim loss always cancels (the training diverged).

    The comparison is step by step, so runs should report their interim losses at the same points (e.g.
    once per epoch). Propulate 1.2.2 cites Lakhmiri & Le Digabel, "Use of static surrogates in hyperparameter
    optimization", Operations Research Forum 3 (2022), doi:10.1007/s43069-022-00128-w, for the idea of a
    cheap, fixed stand-in for the full evaluation; the rule itself is a plain step-wise comparison.

    Parameters
    ----------
    margin : float in (0, 1]
        How close a run must stay to the baseline: ``1`` cancels a run as soon as it is worse than the
        baseline at the same step; ``0.8`` (the default) tolerates interim losses 25 % of the baseline's
        magnitude above it (for positive losses: cancel when ``margin * loss_k > b_k``, as in Propulate).

    Raises
    ------
    ValueError
        If ``margin`` is not in (0, 1].
    """

    def __init__(self, margin: float = 0.8) -> None:
        super().__init__()
        self.margin = check_margin(margin)
        # The best completed run so far; None until there is one.
        self._baseline: Run | None = None

    @property
    def baseline(self) -> list[float]:
        """The interim losses of the best completed run; empty before there is one."""
        return [] if self._baseline is None else list(self._baseline.curve)

    def judge(self, step: int, loss: float) -> bool:  # noqa: D102
        if self._baseline is None:
            return False
        curve = self._baseline.curve
        return exceeds(loss, curve[min(step, len(curve) - 1)], self.margin)

    def learn(self, run: Run) -> None:
        """Make ``run`` the baseline if it completed and is better than the current one."""
        if not run.completed or not run.curve:
            return
        # Ties in the final loss are broken by the curve, so that the baseline does not depend on the order
        # in which runs arrive.
        if self._baseline is None or _rank(run) < _rank(self._baseline):
            self._baseline = Run(list(run.curve), run.loss)


def _rank(run: Run) -> tuple[float, tuple[float, ...]]:
    assert run.loss is not None
    return run.loss, tuple(run.curve)
