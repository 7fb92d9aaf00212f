"""State transfer: each member's committed states, copied into an exploiting member's folder safely.

A member's interval is an evaluation with a folder of its own (:mod:`propulate.checkpoint.evaluations`,
``evaluations/<uid>``). When the interval completed, its folder stays, holding the state committed at its
last step (marked :data:`~propulate.checkpoint.evaluations.INHERITABLE`), so that the member's next
interval, or an exploiting member's, can start from it. The worker that trains a member keeps the folders of
its latest ``keep`` completed intervals and removes older ones, so the disk in use per member stays bounded
by ``keep`` states plus the one being trained.

Before an interval starts, the state it starts from is placed into its own folder as a committed state
(:meth:`MemberStates.seed`): its files are hard-linked (copied where the file system refuses links), so a
multi-GB state costs a few metadata operations, and every rank of a multi-rank worker loads it from there.
The transfer cannot hand over a partial state:

- the copy is made in a temporary folder and renamed into place, so a crash at any moment leaves the new
  folder with the complete state or none (and the next attempt copies again);
- the source is pinned meanwhile: a file ``.pin-<uid>`` in its folder. Its owner removes a folder only when
  it is unpinned, by renaming it away first and looking again for pins in the renamed folder: a pin made
  before the rename is found there (the folder is then renamed back), one attempted after it fails, since
  the folder is gone. A state is only ever removed whole (a renamed folder is removed, never a state in
  place), and a commit of the donor during the copy writes another folder (its running interval's);
- after the copy, the source state is checked to be still in place: what was linked is then complete.

A donor's folder that is gone for good (its owner had trained ``keep`` more intervals before the copy
began) cannot be copied: the exploiting member then keeps its own latest state, with the explored
configuration, and the interval records no donor (``_unavailable`` names the one whose state was gone).

Migrants. A member's latest interval that leaves for another island (:meth:`MemberStates.depart`) takes a
reference to its folder along (``_state``, :mod:`propulate.pbt.lineage`), and its results (``_curve``).
Its sender *leases* the folder for it: a pin, ``.pin-migrant-<uid>`` (the traveller's uid), that the owner's
removals respect like any other, so the state stays on disk while the traveller is in flight, also across
the end of a job (a resume delivers it). The first worker of the new island, which takes in every
immigrant, copies the state into the migrant's own folder (:meth:`MemberStates.arrive`, hard links as above,
marked :data:`~propulate.checkpoint.evaluations.INHERITABLE`), and only then lifts the lease, before the
island hears of the migrant: the island's members exploit it from its own folder. That worker owns the
migrants' folders: of each member of another island it keeps the states of the latest ``keep`` migrants,
the latest being the one its island may draw as a donor, and removes older ones as a member removes its
older states (pins respected). The disk in use per island is thus bounded by ``keep`` states per member
of its own and per member of another island that sent it one. A lease that was lifted after its owner
had last tried to remove the folder leaves it to the end of the run (:meth:`MemberStates.close`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..checkpoint.evaluations import INHERITABLE, INTERIM, LEASE, PENDING, PIN, Inheritance, Resume, states
from ..errors import PropulateError
from ..individual import Individual, Status
from ..validation import check_int
from .exploit import curves
from .lineage import (
    CURVE,
    DONOR,
    EMIGRANT,
    INTERVAL,
    MEMBER,
    PARENT,
    PREVIOUS,
    START,
    STATE,
    UNAVAILABLE,
    UNTIL,
    migrant,
)

__all__ = ["MemberStates", "StateUnavailableError", "lease", "retire", "transfer"]

log = logging.getLogger("propulate")

#: Attempts to pin a source folder that its owner may be renaming back, and the pause between them, seconds.
ATTEMPTS = 50
PAUSE = 0.02
_INCOMING = ".incoming"
_RETIRED = ".retired-"


class StateUnavailableError(PropulateError, OSError):
    """The state to copy is gone: its owner removed it before the copy began."""


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def _pinned(folder: Path) -> bool:
    try:
        return any(name.startswith(PIN) for name in os.listdir(folder))
    except FileNotFoundError:
        return False


def transfer(source: Path, target: Path, pin: str) -> tuple[int, str, list[dict[str, Any]]]:
    """Copy the latest committed state of the evaluation folder ``source`` into ``target`` as committed.

    Parameters
    ----------
    source, target : pathlib.Path
        Evaluation folders; ``target`` exists.
    pin : str
        Names the pin this transfer leaves in ``source`` meanwhile (the exploiting interval's uid).

    Returns
    -------
    tuple[int, str, list[dict]]
        The step of the state copied, the name of its folder in ``target``, and the interim losses that
        ``source`` reported up to that step (its ``interim.json``).

    Raises
    ------
    StateUnavailableError
        If ``source`` holds no committed state, or could not be copied in :data:`ATTEMPTS` attempts (it is
        gone for good, or a file cannot be read: the message says which).
    """
    marker = source / f"{PIN}{pin}"
    failure: OSError | None = None
    for _ in range(ATTEMPTS):
        try:
            marker.touch()
            committed = states(source)
            if not committed:
                raise StateUnavailableError(f"{source} holds no committed state")
            step, _, name = committed[-1]
            incoming = target / _INCOMING
            shutil.rmtree(incoming, ignore_errors=True)
            shutil.copytree(source / name, incoming, copy_function=_link_or_copy)
            interim = json.loads((source / INTERIM).read_text())[:step] if step > 0 else []
            if not (source / name).is_dir():
                raise FileNotFoundError(source / name)  # renamed away meanwhile: the copy may be partial
            final = f"step-{step:08d}.000000"
            shutil.rmtree(target / final, ignore_errors=True)  # a copy an interrupted attempt completed
            os.rename(incoming, target / final)
            return step, final, interim
        except (FileNotFoundError, shutil.Error) as err:
            # Replaced by a newer state, or renamed away for a moment by its owner (see retire).
            failure = err
            time.sleep(PAUSE)
        finally:
            marker.unlink(missing_ok=True)
    raise StateUnavailableError(f"{source} could not be copied: {failure}")


def lease(folder: Path, name: str) -> bool:
    """Pin the evaluation folder ``folder`` with the lease ``name``; whether it holds a committed state then.

    The lease (:data:`LEASE` and ``name``) stays until it is lifted (:func:`lift`): the folder's owner does
    not remove a leased folder. A folder renamed away for a moment by its owner (see :func:`retire`) is
    leased once it is back; one that is gone, or holds no committed state, is not (``False``, no lease left).
    """
    marker = folder / f"{LEASE}{name}"
    for _ in range(ATTEMPTS):
        try:
            marker.touch()
        except FileNotFoundError:  # renamed away for a moment, or gone for good
            time.sleep(PAUSE)
            continue
        if states(folder):
            return True
        time.sleep(PAUSE)  # renamed away after the pin was made: it comes back, pinned
    marker.unlink(missing_ok=True)
    return False


def lift(folder: Path, name: str) -> None:
    """Remove the lease ``name`` from ``folder`` (:func:`lease`), if it is there."""
    try:
        (folder / f"{LEASE}{name}").unlink(missing_ok=True)
    except FileNotFoundError:  # the folder is gone: so is the lease
        pass


def retire(folder: Path) -> bool:
    """Remove the evaluation folder ``folder`` unless a transfer pinned it; whether it is gone."""
    if _pinned(folder):
        return False
    trash = folder.with_name(_RETIRED + folder.name)
    try:
        os.rename(folder, trash)
    except FileNotFoundError:
        return True
    if _pinned(trash):  # pinned between the look and the rename
        os.rename(trash, folder)
        return False
    shutil.rmtree(trash, ignore_errors=True)
    return True


class MemberStates(Inheritance):
    """Where each interval of a population-based training starts, and which states stay.

    See the module docstring. One per worker, handed to its evaluation folders.

    Parameters
    ----------
    keep : int >= 1
        Completed intervals whose state each member keeps (Ray Tune warns below 3, as a donor's state may be
        removed before it is copied; here a transfer pins it instead).

    Raises
    ------
    ValueError
        If ``keep`` is not an int >= 1.
    """

    def __init__(self, keep: int = 3) -> None:
        self.keep_states = check_int("keep_states", keep, 1)
        self._retired: set[int] = set()  # uids of this worker's folders removed in this session
        #: The members whose states this worker keeps (told by its propagator).
        self.members: set[int] = set()
        self._receives = False  # whether this worker took migrants' states over (its island's first)

    def seed(self, ind: Individual, folder: Path) -> Resume | None:
        """Place the state that ``ind`` starts from (``_parent``'s latest) in its folder; see the module."""
        extras = ind.extras
        if MEMBER not in extras:
            return None
        folder.mkdir(parents=True, exist_ok=True)
        if extras[PARENT] < 0:
            return Resume(until=extras[UNTIL])
        parent = folder.parent / str(extras[PARENT])
        try:
            step, name, interim = transfer(parent, folder, str(ind.uid))
        except StateUnavailableError as err:
            if extras[PREVIOUS] < 0 or extras[PREVIOUS] == extras[PARENT]:
                raise
            log.warning(
                f"Member {extras[MEMBER]}: the state of member {extras[DONOR]} to copy is gone ({err}); it "
                "continues from its own with the explored configuration."
            )
            ind[PARENT], ind[DONOR], ind[UNAVAILABLE] = extras[PREVIOUS], -1, extras[DONOR]
            step, name, interim = transfer(folder.parent / str(extras[PREVIOUS]), folder, str(ind.uid))
        if step != extras[START]:
            ind[UNTIL] = extras[UNTIL] - extras[START] + step
            ind[START] = step
        (folder / INTERIM).write_text(json.dumps(interim))
        losses = [(float(e["loss"]), {str(k): float(v) for k, v in e["metrics"].items()}) for e in interim]
        return Resume(losses, step, name, ind.extras[UNTIL])

    def until(self, ind: Individual) -> int:
        """Return ``_until`` of an interval of population-based training; 0 for any other individual."""
        return int(ind.extras.get(UNTIL, 0))

    def keep(self, ind: Individual, folder: Path, island: Iterable[Individual]) -> bool:
        """Keep the folder of the completed interval ``ind``; remove the member's folders beyond ``keep``."""
        if MEMBER not in ind.extras:
            return False
        shutil.rmtree(folder / PENDING, ignore_errors=True)
        (folder / INHERITABLE).touch()
        self._prune(folder.parent, island, {ind.extras[MEMBER]})
        return True

    def depart(
        self, traveller: Individual, emigrant: Individual, folder: Path, island: Iterable[Individual]
    ) -> None:
        """Lease the emigrant's folder for ``traveller`` and note where its state is; see the module.

        ``traveller`` gets ``_state`` (the emigrant's uid, or ``-1`` if its state is gone: the migrant is then
        no donor) and ``_curve`` (its member's results on this island).
        """
        extras = emigrant.extras
        if MEMBER not in extras:
            return
        if lease(folder, str(traveller.uid)):
            traveller[STATE] = emigrant.uid
        else:
            log.warning(
                f"Member {extras[MEMBER]}: the state of interval {extras.get(INTERVAL)} is gone; it "
                "emigrates without one, and no member of its new island can copy it."
            )
            traveller[STATE] = -1
        traveller[EMIGRANT] = extras.get(EMIGRANT, emigrant.uid)
        if CURVE not in extras:
            member = extras[MEMBER]
            results = curves(other for other in island if not migrant(other)).get(member, [])
            traveller[CURVE] = [[step, loss] for step, loss in results]

    def arrive(self, traveller: Individual, folder: Path, island: Iterable[Individual]) -> None:
        """Copy a migrant's state into its own ``folder``, lift its lease; see the module.

        ``_state`` of ``traveller`` becomes its own uid (``-1`` if the state was gone). Idempotent: a
        traveller whose state was taken over already only has its lease lifted.
        """
        extras = traveller.extras
        if MEMBER not in extras or not migrant(traveller) or extras.get(STATE, -1) < 0:
            return
        self._receives = True
        source = extras[STATE]
        if source != traveller.uid:
            origin = folder.parent / str(source)
            try:
                if not (folder / INHERITABLE).exists():
                    folder.mkdir(parents=True, exist_ok=True)
                    _, _, interim = transfer(origin, folder, f"arrival-{traveller.uid}")
                    temporary = folder / f".{INTERIM}.tmp"
                    temporary.write_text(json.dumps(interim))
                    os.replace(temporary, folder / INTERIM)
                    (folder / INHERITABLE).touch()
                traveller[STATE] = traveller.uid
            except StateUnavailableError as err:
                log.warning(
                    f"A migrant of member {extras[MEMBER]} of island {traveller.island} arrived, but its "
                    f"state is gone ({err}); no member can copy it."
                )
                traveller[STATE] = -1
            finally:
                lift(origin, str(traveller.uid))
        self._prune(folder.parent, island, self.members)

    def close(self, base: Path, island: Iterable[Individual]) -> None:
        """Remove this worker's folders beyond ``keep`` that a lease or a copy kept when it last tried."""
        self._prune(base, island, self.members)

    def _prune(self, base: Path, island: Iterable[Individual], members: set[int]) -> None:
        """Remove this worker's folders beyond the latest ``keep``: of ``members``, and of its migrants."""
        kept: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for other in island:
            extras = other.extras
            if MEMBER not in extras or other.status is not Status.COMPLETED:
                continue
            if migrant(other):
                if not self._receives or extras.get(STATE) != other.uid:
                    continue
                key = (other.island, extras[MEMBER])
            elif extras[MEMBER] in members:
                key = (-1, extras[MEMBER])
            else:
                continue
            kept.setdefault(key, []).append((extras[INTERVAL], other.uid))
        for intervals in kept.values():
            for _, uid in sorted(intervals)[: -self.keep_states]:
                if uid not in self._retired and retire(base / str(uid)):
                    self._retired.add(uid)
