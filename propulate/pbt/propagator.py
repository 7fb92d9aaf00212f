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
records its place in the lineage (:mod:`propulate.pbt.lineage`).

Islands. Each island runs a population of its own members. With migration or pollination between islands,
a member's latest interval leaves now and then (:meth:`PopulationBasedTraining.emigrates`: no other interval,
and no migrant, leaves), with a reference to its committed state; on its new island the *migrant* is ranked
with the island's members by the results it carries (``_curve``) and may be drawn as a donor like them,
the latest migrant of each member of another island only. Nobody trains a migrant. A member whose latest
interval left (migration deactivates the emigrant) or was replaced by a pollinator goes on training from
it, but is no donor on its island until its next interval completes. Where Ray Tune's
``PopulationBasedTraining`` has the same knob, the name and default are Ray's; Ray ranks trials by their
last result whatever their progress, this compares members at the same progress.

The loss function is a generator that continues from :attr:`EvaluationCheckpoint.latest` when there is one
and yields one interim loss per step, saving its state into :attr:`EvaluationCheckpoint.path` before each;
it is ended after the interval's last step (it may yield forever). Lower losses are better, as everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..individual import Individual, Status
from ..propagators.base import Propagator
from ..space import SearchSpace
from ..validation import check_int, check_probability, check_real
from .exploit import curves, latest, ranks, truncation
from .explore import check_factors, explore
from .lineage import (
    CURVE,
    DONOR,
    DONOR_ISLAND,
    EMIGRANT,
    INTERVAL,
    MEMBER,
    ORIGIN,
    PARENT,
    PREVIOUS,
    START,
    STATE,
    UNTIL,
    migrant,
)
from .states import MemberStates

__all__ = ["PopulationBasedTraining"]


class PopulationBasedTraining(Propagator):
    """Population-based training: one member per worker, trained interval by interval (module docstring).

    Pass it as the propagator of :class:`propulate.Propulator` or :class:`propulate.Islands` itself, not
    inside :class:`~propulate.propagators.Compose` or :class:`~propulate.propagators.Conditional` (the run
    hands its :attr:`states` to the evaluation folders). ``generations`` is then the number of intervals
    each worker trains. Between islands, members' latest intervals migrate (module docstring).

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
        The member this worker trains (its island rank, known once the loop binds the propagator); after a
        resume onto fewer workers also the members ``member + k island_size`` that exist, in turn.
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
        self._size = 1
        # Per member of the island, the (interval, uid) of its latest completed interval, whether active or
        # not; and what this worker knows of each member it trains.
        self._newest: dict[int, tuple[int, int]] = {}
        self._trained: dict[int, _Trained] = {0: _Trained()}

    @property
    def repeats(self) -> bool:
        """True: a member's next interval repeats its configuration when it continues its training."""
        return True

    @property
    def inheritance(self) -> MemberStates:
        """The member states (:attr:`states`): the evaluation folders' inheritance."""
        return self.states

    def bind(self, island_rank: int, island_size: int = 1) -> None:
        """Train member ``island_rank`` (and members ``island_rank + k island_size`` that exist already)."""
        self.member, self._size = island_rank, max(int(island_size), 1)
        self._trained = {island_rank: _Trained()}
        self.states.members = {island_rank}

    def emigrates(self, ind: Individual) -> bool:
        """Whether ``ind`` is the latest completed interval of a member of this island: only that one leaves.

        Its state is the member's latest, which is kept on disk; a migrant does not travel on.
        """
        extras = ind.extras
        if MEMBER not in extras or migrant(ind) or ind.status is not Status.COMPLETED:
            return False
        return self._newest.get(extras[MEMBER], (-1, -1))[1] == ind.uid

    def observe(self, ind: Individual) -> None:
        """Note each member's latest interval, and an interval of this member that failed.

        A member whose interval failed then exploits whatever its rank.

        Raises
        ------
        TypeError
            If an interval of this member completed without training to its last step: the loss function is
            no generator, or one that ends before.
        """
        extras = ind.extras
        if MEMBER not in extras or migrant(ind):
            return
        member, completed = extras[MEMBER], ind.status is Status.COMPLETED
        if completed and extras[INTERVAL] > self._newest.get(member, (-1, -1))[0]:
            self._newest[member] = (extras[INTERVAL], ind.uid)
        if member % self._size != self.member:
            return
        if member not in self._trained:  # a member of a run with more workers: this one trains it on
            self._trained[member] = _Trained()
            self.states.members.add(member)
        trained = self._trained[member]
        if completed:
            trained.completed(ind)
        if ind.status is Status.FAILED:
            trained.failed = max(trained.failed, extras[INTERVAL])
        elif completed and ind.steps != extras[UNTIL]:
            raise TypeError(
                f"loss_fn: population-based training needs a generator that continues from "
                f"evaluation_checkpoint().latest and yields one interim loss per step, for as many steps as "
                f"asked; interval {extras[INTERVAL]} of member {member} ended at step {ind.steps} "
                f"instead of {extras[UNTIL]}"
            )

    def __call__(self, inds: list[Individual]) -> list[Individual]:
        """Return the next interval of a member this worker trains, from the island's completed ``inds``.

        Of several members (after a resume onto fewer workers), the one with the fewest intervals goes next.
        """
        members = [ind for ind in inds if not migrant(ind)]
        newest = latest(members)
        me, own, last_failed = min(
            (self._progress(member, newest) for member in self._trained),
            key=lambda entry: (1 + max(entry[2], entry[1].extras[INTERVAL] if entry[1] else -1), entry[0]),
        )
        if own is None and last_failed < 0:
            return [self._interval(self.space.decode(self.space.sample(self.rng)), me, 0, None, None)]
        failed = last_failed >= (own.extras[INTERVAL] if own is not None else -1)
        interval = 1 + max(last_failed, own.extras[INTERVAL] if own is not None else -1)
        results, candidates = curves(members), self._candidates(newest)
        if self._trained[me].results:  # all of its results, also those that left the island or were replaced
            results[me] = sorted((step, loss) for step, (_, loss) in self._trained[me].results.items())
        for key, ind in _migrants(inds).items():
            results[key], candidates[key] = [(int(s), float(loss)) for s, loss in ind.extras[CURVE]], ind
        donor = self._donor(me, results, candidates, own, failed)
        if donor is None:  # continue its own training (or, failed without a donor, try again)
            if own is None:
                params = self.space.decode(self.space.sample(self.rng))
                return [self._interval(params, me, interval, None, None)]
            return [self._interval(own.params(), me, interval, own, own)]
        source = candidates[donor]
        params = self.explored(source, inds, interval)
        ind = self._interval(params, me, interval, source, own)
        ind[DONOR] = source.extras[MEMBER]
        if migrant(source):
            ind[DONOR_ISLAND], ind[ORIGIN] = source.island, source.extras.get(EMIGRANT, -1)
        return [ind]

    def explored(self, source: Individual, intervals: list[Individual], interval: int) -> dict[str, Any]:
        """Return the configuration of a member's next interval ``interval`` after it exploited ``source``.

        Population-based training perturbs the donor's configuration (:func:`~propulate.pbt.explore`);
        :class:`~propulate.pbt.PB2` chooses it with a Gaussian-process bandit instead.

        Parameters
        ----------
        source : Individual
            The donor's latest completed interval (a member's, or a migrant's), whose state is copied.
        intervals : list of Individual
            The individuals of the island this worker knows (its members' intervals and migrants), in any
            order and of any status.
        interval : int >= 1
            The index of the exploiting member's next interval.
        """
        return explore(
            source.params(), self.space, self.rng, self.resample_probability, self.perturbation_factors
        )

    def _progress(self, member: int, newest: dict[int, Individual]) -> tuple[int, Individual | None, int]:
        """Return ``(member, its latest completed interval, its latest failed interval)``."""
        own, trained = newest.get(member), self._trained[member]
        if trained.latest is not None and (
            own is None or trained.latest.extras[INTERVAL] > own.extras[INTERVAL]
        ):
            own = trained.latest  # its latest interval left the island, or a pollinator replaced it
        return member, own, trained.failed

    def _candidates(self, newest: dict[int, Individual]) -> dict[int, Individual]:
        """Return the members that may be copied: those whose latest completed interval is still active."""
        return {
            member: ind
            for member, ind in newest.items()
            if ind.extras[INTERVAL] >= self._newest.get(member, (-1, -1))[0]
        }

    def _donor(
        self,
        me: int,
        results: dict[int, list[tuple[int, float]]],
        candidates: dict[int, Individual],
        own: Individual | None,
        failed: bool,
    ) -> int | None:
        """Return the member (or migrant) to copy, or ``None`` to continue (see the module docstring)."""
        if failed:
            rank = ranks(results)
            others = [member for member in candidates if member != me]
            return min(others, key=lambda member: (rank[member], member)) if others else None
        assert own is not None
        if own.extras[UNTIL] < self.burn_in_period:
            return None
        return truncation(me, results, self.quantile_fraction, self.rng, candidates)

    def _interval(
        self,
        params: Mapping[str, Any],
        member: int,
        interval: int,
        parent: Individual | None,
        previous: Individual | None,
    ) -> Individual:
        """Return the individual of interval ``interval`` of ``member``, starting from ``parent``'s state."""
        ind = Individual(dict(params), self.space)
        start = parent.extras[UNTIL] if parent is not None else 0
        ind[MEMBER], ind[INTERVAL], ind[DONOR] = member, interval, -1
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


@dataclass
class _Trained:
    """What a worker knows of a member it trains, whatever migration did to its intervals."""

    latest: Individual | None = None  # its latest completed interval
    failed: int = -1  # its latest interval that failed
    results: dict[int, tuple[int, float]] = field(default_factory=dict)  # (interval, loss) by step

    def completed(self, ind: Individual) -> None:
        """Note the completed interval ``ind`` of the member."""
        extras = ind.extras
        if self.latest is None or extras[INTERVAL] > self.latest.extras[INTERVAL]:
            self.latest = ind
        known = self.results.get(extras[UNTIL])
        if known is None or extras[INTERVAL] > known[0]:
            self.results[extras[UNTIL]] = (extras[INTERVAL], ind.loss)


def _migrants(inds: list[Individual]) -> dict[int, Individual]:
    """Return the donors among the migrants of ``inds``: the latest of each member of another island.

    Only migrants whose state the island took over count (``_state`` at least 0). Each is keyed by
    ``-2 - uid``, apart from the island's members (0 and up) and from ``-1`` (no donor).
    """
    latest_of: dict[tuple[int, int], Individual] = {}
    for ind in inds:
        extras = ind.extras
        if not migrant(ind) or MEMBER not in extras or ind.status is not Status.COMPLETED:
            continue
        if extras.get(STATE, -1) < 0 or not extras.get(CURVE):
            continue
        origin = (ind.island, extras[MEMBER])
        known = latest_of.get(origin)
        if known is None or extras[INTERVAL] > known.extras[INTERVAL]:
            latest_of[origin] = ind
    return {-2 - ind.uid: ind for ind in latest_of.values()}
