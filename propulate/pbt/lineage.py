"""Lineage: what each member of a population-based training did, and the schedule of the best state.

Every individual of a population-based training is one interval of one member's training, and carries its
place in the lineage as ``_``-prefixed entries (:class:`propulate.Individual`), which travel with it to the
island's other workers, into the checkpoint and into the exported frame (:mod:`propulate.report.frame`):

``_member``
    The member (the island rank of the worker that trains it).
``_interval``
    The member's interval counter, from 0.
``_start``, ``_until``
    The steps (interim losses) the interval starts from and ends at: its state starts from the committed
    state after ``_start`` steps, and it is trained up to step ``_until``.
``_parent``
    The ``uid`` of the interval whose committed state it starts from (the member's previous interval, or
    the donor's latest); ``-1`` for a member's first interval, which starts from nothing.
``_donor``
    The member it copied state and configuration from at its start (an exploit); ``-1`` if it continued
    its own training.
``_previous``
    The ``uid`` of the member's previous interval (``-1`` for its first).
``_unavailable``
    Only where an exploit found its donor's state gone (:mod:`propulate.pbt.states`): the donor; the
    interval then starts from the member's own state (``_donor`` is ``-1``) with the explored configuration.
``_donor_island``, ``_origin``
    Only where the donor was a migrant: the island it came from (``_donor`` is its member there), and the
    uid of the interval there whose state the migrant carried (``_parent`` is the migrant's uid, on this
    island): a lineage read from all islands' evaluations follows it (:func:`ancestry`).

A member's latest interval may travel to another island (migration or pollination,
:mod:`propulate.migration`): the traveller is a copy (a uid of its own, ``migration_steps`` above 0) that
keeps the entries above, which name its member and intervals on its own island, and carries two more:

``_state``
    The uid of the evaluation folder that holds its committed state: the emigrant's while it travels, its
    own once its new island took the state over (:meth:`~propulate.pbt.states.MemberStates.arrive`); ``-1``
    when none could be kept.
``_curve``
    Its member's results, ``[step, loss]`` per completed interval, by step: what the new island ranks it by.
``_emigrant``
    The uid of the interval it copies, on its own island.

On its new island a migrant is no member (nobody trains it) but a donor that members may exploit; the
member's history stays with its own island (:func:`histories` leaves migrants out).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..individual import Individual, Status

__all__ = [
    "CURVE",
    "DONOR",
    "DONOR_ISLAND",
    "EMIGRANT",
    "INTERVAL",
    "MEMBER",
    "ORIGIN",
    "PARENT",
    "PREVIOUS",
    "START",
    "STATE",
    "UNAVAILABLE",
    "UNTIL",
    "Segment",
    "ancestry",
    "histories",
    "migrant",
    "schedule",
]

MEMBER = "_member"
INTERVAL = "_interval"
START = "_start"
UNTIL = "_until"
PARENT = "_parent"
DONOR = "_donor"
PREVIOUS = "_previous"
UNAVAILABLE = "_unavailable"
DONOR_ISLAND = "_donor_island"
ORIGIN = "_origin"
STATE = "_state"
CURVE = "_curve"
EMIGRANT = "_emigrant"


def migrant(ind: Individual) -> bool:
    """Whether ``ind`` came from another island: a copy of another island's interval, not a member's own."""
    return ind.migration_steps > 0


@dataclass(frozen=True)
class Segment:
    """One interval of a training: the configuration it was trained with, and its result.

    Attributes
    ----------
    start, until : int
        The steps it started from and ended at.
    params : dict[str, Any]
        The configuration.
    loss : float
        The interval's last interim loss.
    member : int
        The member that trained it.
    donor : int
        The member whose state and configuration it started from (an exploit), else ``-1``.
    uid : int
        The individual that recorded it.
    """

    start: int
    until: int
    params: dict[str, Any]
    loss: float
    member: int
    donor: int
    uid: int


def _segment(ind: Individual) -> Segment:
    extras = ind.extras
    return Segment(
        extras[START], extras[UNTIL], ind.params(), ind.loss, extras[MEMBER], extras[DONOR], ind.uid
    )


def histories(individuals: Iterable[Individual]) -> dict[int, list[Segment]]:
    """Return each member's completed intervals in the order it trained them, by member; no migrant."""
    members: dict[int, list[Individual]] = {}
    for ind in individuals:
        if MEMBER in ind.extras and ind.status is Status.COMPLETED and not migrant(ind):
            members.setdefault(ind.extras[MEMBER], []).append(ind)
    return {
        member: [_segment(ind) for ind in sorted(inds, key=lambda ind: ind.extras[INTERVAL])]
        for member, inds in sorted(members.items())
    }


def ancestry(individuals: Iterable[Individual], uid: int) -> list[Segment]:
    """Return the intervals whose training led to the state of interval ``uid``, first first.

    Follows ``_parent`` back to a first interval: across members where a member exploited another, and
    across islands where it exploited a migrant (to the interval it copied, ``_origin``, where
    ``individuals`` holds it, else to the migrant). The configurations of the segments, each for its
    steps, are the schedule that trained that state (:func:`schedule`).

    Raises
    ------
    KeyError
        If ``uid`` or one of its ancestors is not among ``individuals`` (a worker released it from memory,
        it was never evaluated, or it was trained on another island: pass every island's intervals, e.g.
        :func:`propulate.load_checkpoint`'s population).
    """
    by_uid = {ind.uid: ind for ind in individuals}
    chain = []
    child: Individual | None = None
    while uid >= 0:
        ind = by_uid.get(uid)
        if ind is None:
            where = "" if child is None or not migrant(child) else f" (trained on island {child.island})"
            raise KeyError(f"interval {uid} of the lineage is not among the individuals given{where}")
        child = ind
        chain.append(_segment(ind))
        uid = ind.extras[PARENT]
        if ind.extras.get(ORIGIN, -1) in by_uid:  # the interval the migrant copied, on its own island
            uid = ind.extras[ORIGIN]
    return chain[::-1]


def schedule(individuals: Iterable[Individual]) -> list[Segment]:
    """Return the schedule that trained the best member's state: its ancestry (:func:`ancestry`).

    The best member is the one whose latest completed interval has the lowest loss; with several islands
    in ``individuals`` a member is one of an island (its index there and the island). Returns an empty list
    when no interval completed.

    Raises
    ------
    KeyError
        As :func:`ancestry`, e.g. for one island's individuals where the lineage crossed islands.
    """
    pool = list(individuals)
    finals: dict[tuple[int, int], Individual] = {}
    for ind in pool:
        extras = ind.extras
        if MEMBER not in extras or ind.status is not Status.COMPLETED or migrant(ind):
            continue
        known = finals.get((ind.island, extras[MEMBER]))
        if known is None or extras[INTERVAL] > known.extras[INTERVAL]:
            finals[ind.island, extras[MEMBER]] = ind
    if not finals:
        return []
    best = min(finals.values(), key=lambda ind: ind.loss)
    return ancestry(pool, best.uid)
