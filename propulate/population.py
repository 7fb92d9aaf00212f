"""The population store of one island, as seen by one worker. Pure Python, no MPI.

Breeding needs the best few active individuals, not a sorted copy of everything evaluated so far, so the
store keeps a binary heap of active individuals keyed by loss. Entries of deactivated individuals are
dropped lazily when they reach the top. Reading the best ``k`` costs O(k log n); adding costs O(log n).
The last answer is kept as a sorted list and updated on each addition (O(k) when the newcomer is among
the best, O(1) otherwise), so a worker that breeds from the same few best again and again reads them in
O(k); a deactivation among them drops it. Pollination needs the worst few: a second heap, ordered the
other way, is built on the first such request and kept from then on. A :class:`KeySet` of hashes of every
member's parameter values (:meth:`SearchSpace.key`) tells whether a configuration is known, in O(1) for
the newest keys and O(log n) for the others.

Bounded memory. Where nothing can deactivate a member (no migration, no pollination) and breeding reads
only the best few, the others are never needed again for breeding: each addition can only push members out
of the best ``k``, never bring one back. :meth:`release` then drops every member but the best ``keep`` from
memory; what stays of the others is their configuration's key (the no-repeat rule needs it: a 64-bit hash,
about 8 to 16 bytes per evaluation in a :class:`KeySet`) and their count by status. They remain in the
checkpoint, which :attr:`propulate.Propulator.population` reads them back from. The loop decides when
(:func:`memory_limit`).
"""

from __future__ import annotations

import bisect
import heapq
import os
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .individual import Individual, Status, loss_order

__all__ = ["MEMORY_LIMIT", "KeySet", "Population", "distinct_best", "memory_limit"]

#: Individuals a worker holds in memory before it releases those breeding no longer needs, unless the
#: environment variable ``PROPULATE_MEMORY_LIMIT`` says otherwise (see :func:`memory_limit`).
MEMORY_LIMIT = 4096

# Individuals without a usable loss: kept and counted, never bred from, selected or summarized.
_UNUSABLE = (Status.FAILED, Status.INTERRUPTED)


class KeySet:
    """A set of 64-bit keys (:meth:`SearchSpace.key`) in about 8 to 16 bytes each, for runs of millions.

    A Python set of ints costs about 68 bytes per key (its table and one int object each); a worker that
    keeps the key of every evaluation of its island for the no-repeat rule would grow by that much per
    evaluation. Here the newest keys are in a set and the others in one sorted ``int64`` array: once the
    set holds :attr:`merge_at` keys, ``max(min_batch, n / 8)`` for ``n`` in the array, those not in the
    array already are merged into it (a stable sort of two sorted runs, linear time; during a merge about
    20 bytes per key are held at once). So the set stays below an eighth of the array, and each key costs
    amortized O(1) to add (the array is not searched on adding; a ``Population.add`` costs 2.6 instead of
    2.2 microseconds at a million keys, merges included) and O(log n) to look up in the array (1.2
    microseconds at a million keys, against 0.4 in a set; ``benchmarks/key_memory.py``). The length is
    exact: the first ``len`` after additions counts the set's keys that the array holds too, and later
    additions keep that count.

    Parameters
    ----------
    min_batch : int >= 1
        The fewest keys merged at once (65,536: a run shorter than that never builds the array).
    """

    def __init__(self, min_batch: int = 1 << 16) -> None:
        self.min_batch = min_batch
        self._recent: set[int] = set()
        self._sorted = np.empty(0, dtype=np.int64)
        # Keys of the set that the array holds too; None until ``len`` needs it, then kept up to date until
        # the next merge (a finite space that runs out of configurations asks for it at every repeat).
        self._overlap: int | None = None

    def __len__(self) -> int:
        if self._overlap is None:
            self._overlap = int(np.count_nonzero(self._held(self._recent_array())))
        return self._sorted.size + len(self._recent) - self._overlap

    def __contains__(self, key: object) -> bool:
        return key in self._recent or (self._sorted.size > 0 and self._in_sorted(key))

    def _in_sorted(self, key: object) -> bool:
        if not isinstance(key, int) or not -(2**63) <= key < 2**63:
            return False
        array = self._sorted
        i = int(array.searchsorted(key))
        return i < array.size and int(array[i]) == key

    def _recent_array(self) -> np.ndarray:
        return np.fromiter(self._recent, dtype=np.int64, count=len(self._recent))

    def _held(self, keys: np.ndarray) -> np.ndarray:
        """Return whether the array holds each of ``keys`` (a boolean array of their shape)."""
        array = self._sorted
        if array.size == 0:
            return np.zeros(keys.shape, dtype=bool)
        found = array[np.minimum(array.searchsorted(keys), array.size - 1)]
        return np.asarray(found == keys)

    @property
    def merge_at(self) -> int:
        """How many keys the set holds when they are merged into the array."""
        return max(self.min_batch, self._sorted.size // 8)

    def add(self, key: int) -> None:
        """Add a key: a signed 64-bit int (Python's ``hash`` of a value on a 64-bit build).

        Raises
        ------
        OverflowError
            If ``key`` does not fit in 64 bits (when it is merged into the array).
        """
        recent = self._recent
        if key in recent:
            return
        recent.add(key)
        if self._overlap is not None and self._sorted.size > 0:
            self._overlap += self._in_sorted(key)
        if len(recent) >= self.merge_at:
            new = self._recent_array()
            new = new[~self._held(new)]
            merged = np.concatenate((self._sorted, new))
            del new
            self._sorted = np.empty(0, dtype=np.int64)
            merged.sort(kind="stable")  # timsort: the old array is one run, the new keys sort in a few
            self._sorted = merged
            recent.clear()
            self._overlap = None


class Population:
    """All individuals an island's worker knows of, in the order they arrived.

    Individuals are identified by their ``uid``. A deactivation may arrive before the individual it
    concerns (messages from different workers are not ordered); it is then applied on arrival. Completed
    and pruned evaluations take part in breeding and selection (a pruned one with its last interim loss,
    as in Propulate 1.2.2, which stores a cancelled individual with that loss); only completed ones count
    in the summary and as the run's best (:func:`distinct_best`). A failed or interrupted individual is
    kept (it counts as evaluated and travels with the population) but never chosen.

    After :meth:`release`, iteration, ``len`` and :meth:`get` cover the members still in memory;
    :attr:`n_known`, :attr:`released`, :meth:`knows`, :attr:`n_distinct` and :meth:`evaluation_counts`
    cover every member ever stored.
    """

    def __init__(self) -> None:
        self._members: dict[int, Individual] = {}
        self._heap: list[tuple[float, int, Individual]] = []
        # Keyed by minus the loss: the worst first (of equal ones the lowest uid, as in the other heap).
        self._worst_heap: list[tuple[float, int, Individual]] | None = None
        self._pending_deactivation: set[int] = set()
        # The breedable individuals in arrival order, for propagators that take all of them.
        self._active: dict[int, Individual] = {}
        # The best ``_top_k`` active individuals as heap entries, best first; None when not known.
        self._top: list[tuple[float, int, Individual]] | None = None
        self._top_k = 0
        # SearchSpace.key of every member's parameter values, whatever its status: what the island knows.
        self._keys = KeySet()
        # Members dropped from memory by release(), and evaluations (not copies from another island) by
        # status of every member ever stored.
        self._released = 0
        self._evaluated: dict[Status, int] = {}

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Individual]:
        return iter(self._members.values())

    def __contains__(self, uid: object) -> bool:
        return uid in self._members

    @property
    def n_active(self) -> int:
        """Number of active individuals."""
        return len(self._active)

    @property
    def n_known(self) -> int:
        """Number of members ever stored: those in memory and those released."""
        return len(self._members) + self._released

    @property
    def released(self) -> int:
        """Number of members :meth:`release` dropped from memory."""
        return self._released

    def evaluation_counts(self) -> dict[Status, int]:
        """Return how many members were evaluated on this island, by status, released ones included.

        Copies sent to this island by another (``migration_steps > 0``) are not counted: their evaluation
        is counted on the island that made it.
        """
        return dict(self._evaluated)

    @property
    def n_distinct(self) -> int:
        """Number of distinct parameter configurations among the members (of any status)."""
        return len(self._keys)

    def knows(self, key: int) -> bool:
        """Whether a member has the parameter values of :meth:`SearchSpace.key` ``key``; O(1).

        Every member counts, active or not, evaluated, failed or pruned: the island has spent an
        evaluation on it. Members of another search space (none in a run) are compared by key alone.
        """
        return key in self._keys

    def get(self, uid: int) -> Individual | None:
        """Return the individual with this ``uid``, or ``None``."""
        return self._members.get(uid)

    def add(self, ind: Individual) -> None:
        """Store an evaluated individual; its ``uid`` must be new to this population."""
        # Called for every evaluation of the island on every worker: kept to plain statements.
        uid = ind.uid
        assert uid >= 0 and uid not in self._members, f"uid {uid} is not new"
        if self._pending_deactivation and uid in self._pending_deactivation:
            self._pending_deactivation.discard(uid)
            ind.active = False
        self._members[uid] = ind
        self._keys.add(ind.space.key(ind.position))
        if ind.migration_steps == 0:
            self._evaluated[ind.status] = self._evaluated.get(ind.status, 0) + 1
        if not ind.active or ind.status in _UNUSABLE:
            return
        self._active[uid] = ind
        loss = loss_order(ind)
        entry = (loss, uid, ind)
        heapq.heappush(self._heap, entry)
        top = self._top
        if top is not None and self._top_k > 0 and (len(top) < self._top_k or entry < top[-1]):
            # Never compares the individuals themselves: uids are unique.
            bisect.insort(top, entry)
            if len(top) > self._top_k:
                top.pop()
        if self._worst_heap is not None:
            heapq.heappush(self._worst_heap, (-loss, uid, ind))

    def extend(self, inds: Iterable[Individual]) -> None:
        """Store several individuals."""
        for ind in inds:
            self.add(ind)

    def deactivate(self, uid: int) -> None:
        """Mark an individual inactive; remember the request if it has not arrived yet."""
        ind = self._members.get(uid)
        if ind is None:
            self._pending_deactivation.add(uid)
        elif ind.active:
            ind.active = False
            self._active.pop(uid, None)
            top = self._top
            if top is not None and any(entry[1] == uid for entry in top):
                self._top = None

    def best(self, k: int, where: Callable[[Individual], bool] | None = None) -> list[Individual]:
        """Return the ``k`` active individuals of lowest loss, best first (fewer if fewer exist).

        With ``where``, only individuals for which it is true count; the cost grows with the number of
        better individuals it rejects, not with the population. Without ``where``, O(k) when the best ``k``
        (or more) were read before and none of them has been deactivated since.
        """
        if where is not None:
            return _first(self._heap, k, where)
        top = self._top
        if top is not None and self._top_k >= k:
            chosen = [entry[2] for entry in top[:k]]
            if all(ind.active for ind in chosen):  # guards against ``active`` set by hand, too
                return chosen
        chosen = _first(self._heap, k, None)
        self._top = [(loss_order(ind), ind.uid, ind) for ind in chosen]
        self._top_k = k
        return chosen

    def worst(self, k: int, where: Callable[[Individual], bool] | None = None) -> list[Individual]:
        """Return the ``k`` active individuals of highest loss, worst first (fewer if fewer exist).

        Of equal losses the lowest ``uid`` comes first. The first call costs O(n); later ones as
        :meth:`best`.
        """
        if self._worst_heap is None:
            self._worst_heap = [(-loss_order(ind), ind.uid, ind) for ind in self._active.values()]
            heapq.heapify(self._worst_heap)
        return _first(self._worst_heap, k, where)

    def release(self, keep: int) -> int:
        """Drop from memory every member but the ``keep`` active ones of lowest loss; return how many went.

        The dropped members stay known (:meth:`knows`, :attr:`n_known`, :meth:`evaluation_counts`) but can
        no longer be read, selected or deactivated. So only call it where nothing deactivates members
        (an island without migration or pollination) and nothing reads more than the best ``keep``:
        then breeding from :meth:`best` goes on exactly as if nothing had been dropped. O(n + keep log n).

        Parameters
        ----------
        keep : int >= 0
            How many of the best active members with a usable loss to keep (order of :meth:`best`).
        """
        kept = {ind.uid for ind in self.best(keep)}
        before = len(self._members)
        self._members = {uid: ind for uid, ind in self._members.items() if uid in kept}
        self._active = dict(self._members)  # every member kept is active
        self._heap = [(loss_order(ind), ind.uid, ind) for ind in self._active.values()]
        heapq.heapify(self._heap)
        self._worst_heap = None
        if self._top is not None and self._top_k > keep:
            self._top = None
        dropped = before - len(self._members)
        self._released += dropped
        return dropped

    def active(self) -> list[Individual]:
        """Return every active individual with a usable loss, in arrival order (O(number active))."""
        return list(self._active.values())

    def distinct_best(self, k: int) -> list[Individual]:
        """Return up to ``k`` individuals of lowest loss with pairwise different parameters or loss.

        See :func:`distinct_best`; over every member, in arrival order.
        """
        return distinct_best(self._members.values(), k)


def memory_limit() -> int:
    """Return the members a worker holds in memory before it releases some: ``PROPULATE_MEMORY_LIMIT``.

    Unset or empty: :data:`MEMORY_LIMIT` (4096). A worker releases only where that is exact (see the
    module docstring and :class:`propulate.Propulator`), and never before it holds twice what it keeps.

    Raises
    ------
    ValueError
        If the variable holds anything but a positive integer.
    """
    value = os.environ.get("PROPULATE_MEMORY_LIMIT", "").strip()
    if not value:
        return MEMORY_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"PROPULATE_MEMORY_LIMIT: expected a positive number of individuals, got {value!r}")
    return limit


def distinct_best(individuals: Iterable[Individual], k: int) -> list[Individual]:
    """Return up to ``k`` of ``individuals`` of lowest loss with pairwise different parameters or loss.

    Pruned individuals are left out: their loss is an interim one, not comparable with a final loss.
    Active or not: an individual that emigrated is still the best its island found; of equal individuals
    the active one is reported, then the one of lowest ``uid``, whatever the order in which they arrived
    (so a population read back from the checkpoint reports the same, and merging the lists of several
    islands gives what one list of all their individuals would). O(n + m log n) for the m best read until
    ``k`` distinct ones are found: a heap is built in linear time instead of sorting everything.
    """
    if k <= 0:
        return []
    # The uid, then the position, break ties, so that individuals themselves are never compared.
    order = [
        (loss_order(ind), not ind.active, ind.uid, i, ind)
        for i, ind in enumerate(individuals)
        if ind.status not in _UNUSABLE and ind.status is not Status.PRUNED
    ]
    heapq.heapify(order)
    chosen: list[Individual] = []
    seen: set[tuple[object, ...]] = set()
    while order and len(chosen) < k:
        loss, _, _, _, ind = heapq.heappop(order)
        signature = (loss, *ind.values())
        if signature not in seen:
            seen.add(signature)
            chosen.append(ind)
    return chosen


def _first(
    heap: list[tuple[float, int, Individual]], k: int, where: Callable[[Individual], bool] | None
) -> list[Individual]:
    """Return the first ``k`` active individuals of ``heap`` (for which ``where`` holds), in heap order.

    Entries of deactivated individuals are dropped for good; the others are pushed back.
    """
    taken: list[tuple[float, int, Individual]] = []
    skipped: list[tuple[float, int, Individual]] = []
    chosen: list[Individual] = []
    while heap and len(chosen) < k:
        entry = heapq.heappop(heap)
        ind = entry[2]
        if not ind.active:
            continue
        if where is None or where(ind):
            chosen.append(ind)
            taken.append(entry)
        else:
            skipped.append(entry)
    for entry in taken:
        heapq.heappush(heap, entry)
    for entry in skipped:
        heapq.heappush(heap, entry)
    return chosen
