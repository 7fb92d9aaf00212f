"""Population-based training as a propagator: each worker trains one member, interval by interval.

Jaderberg et al., "Population Based Training of Neural Networks", arXiv:1711.09846 (2017). A member is a
configuration and its network's state. Each worker of an island trains one member (the worker's island rank
names it): every evaluation is one interval of ``perturbation_interval`` steps (interim losses a generator
loss function yields, committed with :func:`propulate.evaluation_checkpoint`), continued from the state the
interval starts from. Between two intervals the worker breeds the next one, asynchronously, from what the
island's workers told it, without waiting for anybody:

- *exploit* (:mod:`propulate.pbt.exploit`): after ``burn_in_period`` steps, a member ranked in the bottom
  ``quantile_fraction`` of the members, each pair compared at the progress both reached, takes the latest
  committed state and configuration of a member drawn from the top quantile (a member whose interval
  failed takes the best member's, whatever its rank);
- *explore* (:mod:`propulate.pbt.explore`): a member that exploited perturbs the configuration it took;
- otherwise the member continues its own training with its configuration.

The state is handed over by the evaluation folders (:mod:`propulate.pbt.states`), and every interval
records its place in the lineage (:mod:`propulate.pbt.lineage`). Where Ray Tune's
``PopulationBasedTraining`` has the same knob, the name and default are Ray's; Ray ranks trials by their
last result whatever their progress, this compares members at the same progress.

The loss function is a generator that continues from :attr:`EvaluationCheckpoint.latest` when there is one
and yields one interim loss per step, saving its state into :attr:`EvaluationCheckpoint.path` before each;
it is ended after the interval's last step (it may yield forever). Lower losses are better, as everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ..individual import Individual, Status
from ..propagators.base import Propagator
from ..space import SearchSpace
from ..validation import check_int, check_probability, check_real
from .exploit import curves, latest, ranks, truncation
from .explore import check_factors, explore
from .lineage import DONOR, INTERVAL, MEMBER, PARENT, PREVIOUS, START, UNTIL
from .states import MemberStates

__all__ = ["PopulationBasedTraining"]


class PopulationBasedTraining(Propagator):
    """Population-based training: one member per worker, trained interval by interval (module docstring).

    Pass it as the propagator of :class:`propulate.Propulator` or :class:`propulate.Islands` itself, not
    inside :class:`~propulate.propagators.Compose` or :class:`~propulate.propagators.Conditional` (the run
    hands its :attr:`states` to the evaluation folders); members do not migrate between islands.
    ``generations`` is then the number of intervals each worker trains.

    Parameters
    ----------
    limits : Mapping[str, Any] or SearchSpace
        The search space: each member's first configuration is drawn from it, and explored configurations
        stay in it.
    rng : random.Random, optional
        This worker's generator (draws first configurations, donors and perturbations).
    perturbation_interval : int >= 1
        Steps (interim losses) per interval: how often a member may exploit and explore.
    burn_in_period : int >= 0
        Steps before a member may exploit for the first time.
    quantile_fraction : float in [0, 0.5]
        Fraction of the members in the bottom quantile (which exploit) and in the top one (the donors).
    resample_probability : float in [0, 1]
        Probability that exploring draws a parameter anew instead of perturbing it.
    perturbation_factors : sequence of float > 0
        Factors a numeric parameter is multiplied by when explored, one drawn per parameter.
    keep_states : int >= 1
        Completed intervals whose committed state each member keeps on disk for later intervals to start
        from (:class:`~propulate.pbt.states.MemberStates`).

    Attributes
    ----------
    member : int
        The member this worker trains (its island rank, known once the loop binds the propagator).
    states : MemberStates
        Places each interval's starting state in its evaluation folder and bounds the states kept.

    Raises
    ------
    ValueError
        For an argument out of range (named in the message), or limits that are not a search space.
    TypeError
        If ``rng`` is not a ``random.Random``.
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
    ) -> None:
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(
                f"rng: expected a random.Random, this rank's own (e.g. propulate.utils.rank_rng(seed)), "
                f"got {type(rng).__name__}"
            )
        super().__init__(parents=-1, offspring=1, rng=rng)
        self.space = SearchSpace.of(limits)
        self.perturbation_interval = check_int("perturbation_interval", perturbation_interval, 1)
        self.burn_in_period = check_int("burn_in_period", burn_in_period, 0)
        self.quantile_fraction = check_real("quantile_fraction", quantile_fraction, 0.0)
        if self.quantile_fraction > 0.5:
            raise ValueError(f"quantile_fraction: expected a float in [0, 0.5], got {quantile_fraction!r}")
        self.resample_probability = check_probability("resample_probability", resample_probability)
        self.perturbation_factors = check_factors(perturbation_factors)
        self.states = MemberStates(keep_states)
        self.member = 0
        self._failed = -1  # the latest interval of this member that failed

    @property
    def repeats(self) -> bool:
        """True: a member's next interval repeats its configuration when it continues its training."""
        return True

    def bind(self, island_rank: int, island_size: int = 1) -> None:
        """Train member ``island_rank``."""
        self.member = island_rank

    def observe(self, ind: Individual) -> None:
        """Note an interval of this member that failed: the member then exploits whatever its rank.

        Raises
        ------
        TypeError
            If an interval of this member completed without training to its last step: the loss function is
            no generator, or one that ends before.
        """
        extras = ind.extras
        if extras.get(MEMBER) != self.member:
            return
        if ind.status is Status.FAILED:
            self._failed = max(self._failed, extras[INTERVAL])
        elif ind.status is Status.COMPLETED and ind.steps != extras[UNTIL]:
            raise TypeError(
                f"loss_fn: population-based training needs a generator that continues from "
                f"evaluation_checkpoint().latest and yields one interim loss per step, for as many steps as "
                f"asked; interval {extras[INTERVAL]} of member {self.member} ended at step {ind.steps} "
                f"instead of {extras[UNTIL]}"
            )

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Return this member's next interval, bred from the island's completed intervals ``inds``."""
        newest = latest(inds)
        own = newest.get(self.member)
        if own is None and self._failed < 0:
            return [self._interval(self.space.decode(self.space.sample(self.rng)), 0, None, None)]
        failed = self._failed >= (own.extras[INTERVAL] if own is not None else -1)
        interval = 1 + max(self._failed, own.extras[INTERVAL] if own is not None else -1)
        donor = self._donor(inds, own, failed)
        if donor is None:  # continue its own training (or, failed without a donor, try again)
            if own is None:
                return [self._interval(self.space.decode(self.space.sample(self.rng)), interval, None, None)]
            return [self._interval(own.params(), interval, own, own)]
        source = newest[donor]
        params = explore(
            source.params(), self.space, self.rng, self.resample_probability, self.perturbation_factors
        )
        ind = self._interval(params, interval, source, own)
        ind[DONOR] = donor
        return [ind]

    def _donor(self, inds: list[Individual], own: Individual | None, failed: bool) -> int | None:
        """Return the member to copy, or ``None`` to continue (see the module docstring)."""
        members = curves(inds)
        if failed:
            rank = ranks(members)
            others = [member for member in members if member != self.member]
            return min(others, key=lambda member: (rank[member], member)) if others else None
        assert own is not None
        if own.extras[UNTIL] < self.burn_in_period:
            return None
        return truncation(self.member, members, self.quantile_fraction, self.rng)

    def _interval(
        self, params: Mapping[str, Any], interval: int, parent: Individual | None, previous: Individual | None
    ) -> Individual:
        """Return the individual of interval ``interval`` of this member, starting from ``parent``'s state."""
        ind = Individual(dict(params), self.space)
        start = parent.extras[UNTIL] if parent is not None else 0
        ind[MEMBER], ind[INTERVAL], ind[DONOR] = self.member, interval, -1
        ind[START], ind[UNTIL] = start, start + self.perturbation_interval
        ind[PARENT] = parent.uid if parent is not None else -1
        ind[PREVIOUS] = previous.uid if previous is not None else -1
        return ind

    def __repr__(self) -> str:
        return (
            f"PopulationBasedTraining(perturbation_interval={self.perturbation_interval}, "
            f"burn_in_period={self.burn_in_period}, quantile_fraction={self.quantile_fraction}, "
            f"resample_probability={self.resample_probability}, "
            f"perturbation_factors={self.perturbation_factors}, keep_states={self.states.keep_states})"
        )
