"""What a worker tells its island's other workers, and how: one message per generation.

A worker's news is what entered its population since it last told its island (its own evaluated individual,
immigrants it took in as the island's first worker, deactivations) and the individual it starts evaluating
now (the announcement that keeps peers from breeding the same configuration, with how many evaluations the
worker has started this session and how long they take on average: see :mod:`propulate.breeding`). A worker
that stops breeding says so once (it retires), so that nobody waits for its next result; one that finds
nothing to breed for now (a finite search space whose last configurations its peers evaluate) says that it
evaluates nothing (it withdraws its announcement), so that no peer takes a configuration it gave up for
taken.

On the wire an update is ``(chunks, deactivated, announcement)``. ``chunks`` are the individuals as plain
values (:meth:`Individual.packed`) in runs of one search space; a run's search space is named only when it
differs from the last one this sender named, so a run of one space names it in the sender's first message with
individuals and peers remember it per sender (messages from one sender arrive in order). ``deactivated`` is a
list of uids. ``announcement`` is ``None`` or ``(configuration, evaluations started, mean evaluation seconds,
retired)``: the configuration as :meth:`SearchSpace.canonical` bytes, which the peers hash, or ``None`` when
the worker evaluates nothing (it withdrew, or retired). No MPI in here: the loop sends and receives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..individual import Individual, unpack
from ..space import SearchSpace

__all__ = ["Announcement", "IslandNews"]

# Packed individuals of one search space, the space named only when it changes.
_Chunk = tuple[SearchSpace | None, list[tuple[Any, ...]]]


@dataclass(frozen=True)
class Announcement:
    """What a peer said about the evaluation it starts, or that it retires.

    Attributes
    ----------
    key : int or None
        :meth:`SearchSpace.key` of the configuration the peer evaluates now; ``None`` if it evaluates nothing
        (it retires, or it withdrew its last announcement).
    started : int >= 0
        Evaluations the peer has started this session, this one included.
    period : float >= 0
        The peer's mean evaluation time so far, seconds.
    configuration : bytes or None
        The configuration as :meth:`SearchSpace.canonical` wrote it (``key`` is its hash); ``None`` if the
        peer evaluates nothing. :meth:`SearchSpace.from_canonical` reads it back.
    retired : bool
        Whether the peer breeds no more (else, with ``key`` ``None``, it may breed again).
    """

    key: int | None
    started: int
    period: float
    configuration: bytes | None = None
    retired: bool = False


class IslandNews:
    """One worker's side of the island updates: what it has yet to tell, and how to read what it is told.

    Parameters
    ----------
    has_peers : bool
        Whether the island has other workers; without, nothing is queued and nothing is sent.
    """

    def __init__(self, has_peers: bool) -> None:
        self.has_peers = has_peers
        self._added: list[Individual] = []
        self._deactivated: list[int] = []
        # The search space last named to the island's peers, and the one each peer last named to us.
        self._sent_space: SearchSpace | None = None
        self._peer_spaces: dict[int, SearchSpace] = {}

    def queue(self, added: list[Individual], deactivated: list[int]) -> None:
        """Remember individuals that entered the population and deactivated uids, to tell the peers."""
        if self.has_peers:
            self._added.extend(added)
            self._deactivated.extend(deactivated)

    def update(
        self,
        announce: Individual | None = None,
        started: int = 0,
        period: float = 0.0,
        retire: bool = False,
        withdraw: bool = False,
    ) -> tuple[Any, ...] | None:
        """Return the update to send now and forget the queued news; ``None`` when there is nothing to say.

        Parameters
        ----------
        announce : Individual, optional
            The individual this worker starts evaluating.
        started : int
            Evaluations this worker has started this session, ``announce`` included.
        period : float
            This worker's mean evaluation time so far, seconds.
        retire : bool
            Say that this worker breeds no more.
        withdraw : bool
            Say that this worker evaluates nothing now, but may breed again.
        """
        said = retire or withdraw or announce is not None
        if not self.has_peers or not (self._added or self._deactivated or said):
            return None
        chunks = self._pack(self._added)
        announcement: tuple[bytes | None, int, float, bool] | None = None
        if announce is not None:
            announcement = (announce.space.canonical(announce.position), started, period, False)
        elif said:
            announcement = (None, started, period, retire)
        update = (chunks, self._deactivated, announcement)
        self._added = []
        self._deactivated = []
        return update

    def _pack(self, added: list[Individual]) -> list[_Chunk]:
        chunks: list[_Chunk] = []
        for ind in added:
            if not chunks or ind.space is not self._sent_space:
                named = None if ind.space is self._sent_space else ind.space
                self._sent_space = ind.space
                chunks.append((named, []))
            chunks[-1][1].append(ind.packed())
        return chunks

    def read(
        self, source: int, update: tuple[Any, ...]
    ) -> tuple[list[list[Individual]], list[int], Announcement | None]:
        """Unpack an update from ``source``: runs of individuals, deactivated uids, its announcement."""
        chunks, deactivated, announcement = update
        runs = []
        for named, rows in chunks:
            if named is not None:
                self._peer_spaces[source] = named
            space = self._peer_spaces[source]
            runs.append([unpack(space, *row) for row in rows])
        said = None
        if announcement is not None:
            configuration, started, period, retired = announcement
            key = None if configuration is None else hash(configuration)
            said = Announcement(key, started, period, configuration, retired)
        return runs, deactivated, said
