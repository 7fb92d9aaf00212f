"""The population store of one island, as seen by one worker. Pure Python, no MPI.

Breeding needs the best few active individuals, not a sorted copy of everything evaluated so far, so the
store keeps a binary heap of active individuals keyed by loss. Entries of deactivated individuals are
dropped lazily when they reach the top. Reading the best ``k`` costs O(k log n); adding costs O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from .individual import Individual, Status, loss_order

__all__ = ["Population"]

# Individuals without a usable loss: kept and counted, never bred from, selected or summarized.
_UNUSABLE = (Status.FAILED, Status.INTERRUPTED)


def _breedable(ind: Individual) -> bool:
    return ind.active and ind.status not in _UNUSABLE


class Population:
    """All individuals an island's worker knows of, in the order they arrived.

    Individuals are identified by their ``uid``. A deactivation may arrive before the individual it
    concerns (messages from different workers are not ordered); it is then applied on arrival. Only
    completed evaluations take part in breeding, selection and the summary: a failed individual is kept
    (it counts as evaluated and travels with the population) but never chosen.
    """

    def __init__(self) -> None:
        self._members: dict[int, Individual] = {}
        self._heap: list[tuple[float, int, Individual]] = []
        self._pending_deactivation: set[int] = set()
        self._n_active = 0

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Individual]:
        return iter(self._members.values())

    def __contains__(self, uid: object) -> bool:
        return uid in self._members

    @property
    def n_active(self) -> int:
        """Number of active individuals."""
        return self._n_active

    def get(self, uid: int) -> Individual | None:
        """Return the individual with this ``uid``, or ``None``."""
        return self._members.get(uid)

    def add(self, ind: Individual) -> None:
        """Store an evaluated individual; its ``uid`` must be new to this population."""
        assert ind.uid >= 0 and ind.uid not in self._members, f"uid {ind.uid} is not new"
        if ind.uid in self._pending_deactivation:
            self._pending_deactivation.discard(ind.uid)
            ind.active = False
        self._members[ind.uid] = ind
        if _breedable(ind):
            self._n_active += 1
            heapq.heappush(self._heap, (loss_order(ind), ind.uid, ind))

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
            if ind.status not in _UNUSABLE:
                self._n_active -= 1

    def best(self, k: int) -> list[Individual]:
        """Return the ``k`` active individuals of lowest loss, best first (fewer if fewer exist)."""
        best: list[tuple[float, int, Individual]] = []
        while self._heap and len(best) < k:
            entry = heapq.heappop(self._heap)
            if entry[2].active:
                best.append(entry)
        for entry in best:
            heapq.heappush(self._heap, entry)
        return [entry[2] for entry in best]

    def active(self) -> list[Individual]:
        """Return every active individual with a usable loss, in arrival order (O(n))."""
        return [ind for ind in self._members.values() if _breedable(ind)]

    def distinct_best(self, k: int) -> list[Individual]:
        """Return up to ``k`` individuals of lowest loss with pairwise different parameters or loss.

        Active or not: an individual that emigrated is still the best this island found; of equal
        individuals the active one is reported. O(n log n).
        """
        chosen: list[Individual] = []
        seen: set[tuple[object, ...]] = set()
        completed = (ind for ind in self._members.values() if ind.status not in _UNUSABLE)
        for ind in sorted(completed, key=lambda ind: (loss_order(ind), not ind.active)):
            if len(chosen) == k:
                break
            signature = (loss_order(ind), *ind.values())
            if signature not in seen:
                seen.add(signature)
                chosen.append(ind)
        return chosen
