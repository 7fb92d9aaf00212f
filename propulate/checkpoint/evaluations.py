"""Per-evaluation checkpoints: a folder of its own for every evaluation, so that a training survives its job.

A loss function calls :func:`evaluation_checkpoint` to get the :class:`EvaluationCheckpoint` of the
individual it evaluates. It saves its state (model, optimizer, scheduler, random generators) into
:attr:`~EvaluationCheckpoint.path`; the state becomes :attr:`~EvaluationCheckpoint.latest` when the loss
function yields its next interim loss (a generator) or calls :meth:`~EvaluationCheckpoint.commit` (any loss
function). An evaluation interrupted by the end of a job is evaluated again first when the run resumes, on
whichever worker the resume gives it to; the loss function then finds the state it committed last in
``latest``, taken after :attr:`~EvaluationCheckpoint.step` interim losses, and continues from there. Interim
losses that the interrupted attempt had already reported are not reported again: their values, kept in the
folder, are what the surrogate and the individual see. At a stop (a signal, the time limit), an evaluation
that commits is interrupted at its next commit instead of running on into the grace period, so the work of
a stopped job is lost only when the grace period ends between two commits.

The folders live in ``<checkpoint_path>/evaluations``, one per individual (named by its ``uid``)::

    evaluations/<uid>/
        interim.json   the interim losses (and metrics) reported so far, rewritten atomically by the
                       worker's first rank at every new one
        step-<k>.<n>/  the state committed after k interim losses, the n-th commit after as many: the
                       latest commit only
        pending/       what the loss function saves for its next commit

A commit renames ``pending`` to a new ``step-<k>.<n>`` (atomic on a POSIX file system, and on Lustre and GPFS)
and then removes the previous state, so a crash at any moment leaves a complete state, the latest being the
one of highest ``(k, n)``; ``interim.json`` is written before the rename, so it never counts fewer interim
losses than the state. A plain loss function reports no interim losses: its commits are ``step-0.<n>``. Once
an evaluation finished, its folder is removed, or kept while the individual is among the ``keep_best`` best
completed ones (see :class:`EvaluationFolders`), so disk use stays bounded by the workers' running evaluations
plus ``keep_best`` folders.

The design follows the function API of Ray Tune (``ray.train.get_checkpoint()`` returns the latest committed
checkpoint of the trial or ``None``, and ``ray.train.report(metrics, checkpoint=...)`` ties a checkpoint to a
reported result; Ray keeps ``num_to_keep`` checkpoints by a score) and Syne Tune's ``checkpoint_dir`` given to
the training script, rather than Optuna's, which leaves the folder to the user and finds an interrupted
trial's number with ``RetryFailedTrialCallback.retried_trial_number``. Unlike Ray, the state is written in
place, in a folder the library names, instead of being copied from a temporary folder, so that a multi-GB
model is written once; unlike Optuna, a re-reported interim loss cannot reach the pruner twice.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..individual import Individual

__all__ = [
    "INHERITABLE",
    "EvaluationCheckpoint",
    "EvaluationFolders",
    "Inheritance",
    "Resume",
    "committed",
    "evaluation_checkpoint",
    "states",
    "sweep",
]

log = logging.getLogger("propulate")

#: The folder of the evaluation folders inside ``checkpoint_path``.
FOLDER = "evaluations"
INTERIM = "interim.json"
PENDING = "pending"
#: A file in an evaluation folder whose state later evaluations may start from: no sweep removes the folder.
INHERITABLE = "inheritable"
#: Files in an inheritable folder whose names start so pin it: its keeper does not remove it meanwhile. A
#: pin is held while the state is copied, a lease (:data:`LEASE`, the uid of an individual follows) while
#: the individual that will copy it travels (see :mod:`propulate.pbt.states`).
PIN = ".pin-"
LEASE = ".pin-migrant-"
_STATE = re.compile(r"step-(\d+)\.(\d+)")

_active: EvaluationFolders | None = None  # the folders of the evaluation under way, on this rank


def evaluation_checkpoint() -> EvaluationCheckpoint:
    """Return the checkpoint folder of the evaluation under way; call it inside the loss function.

    Every rank of a multi-rank worker gets the same folders. The first call of an evaluation creates
    :attr:`EvaluationCheckpoint.path`; an evaluation that never calls it costs nothing and is evaluated from
    the start again if it is interrupted. Outside an evaluation run by :meth:`propulate.Propulator.propulate`
    (a loss function called by hand to try it out), it returns folders of its own in a new temporary
    directory, removed when the process exits, that never resume: the loss function runs unchanged.

    Returns
    -------
    EvaluationCheckpoint
        The folders of the individual being evaluated and whether, and from which step, it resumes.

    Examples
    --------
    A generator loss function that saves its state every epoch and continues where it left off::

        def loss_fn(params):
            checkpoint = propulate.evaluation_checkpoint()
            model, optimizer = build(params)
            start = 0
            if checkpoint.latest is not None:  # an earlier job trained this individual for a while
                state = torch.load(checkpoint.latest / "state.pt")
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
                start = checkpoint.step
            for epoch in range(start, 8):
                train_one_epoch(model, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                           checkpoint.path / "state.pt")
                yield validation_loss(model)  # commits what is in checkpoint.path
    """
    folders = _active
    current = folders.checkpoint() if folders is not None else _standalone()
    current.path.mkdir(parents=True, exist_ok=True)
    current.asked = True
    return current


def _standalone() -> EvaluationCheckpoint:
    """Return the folders of a loss function called outside a run: in a temporary directory, this rank's."""
    directory = Path(tempfile.mkdtemp(prefix="propulate-evaluation-"))
    atexit.register(shutil.rmtree, directory, True)
    folders = EvaluationFolders(directory, root=True)
    # Not made the current evaluation's: each call by hand is an evaluation of its own.
    folders.current = EvaluationCheckpoint(
        -1, folders.folder(-1), Resume(), lambda: _ignore(folders.commit(0))
    )
    return folders.current


def _ignore(value: object) -> None:
    return None


def _nothing() -> None:
    return None


@dataclass
class Resume:
    """What the folder of an interrupted evaluation holds, read by the worker's first rank.

    Attributes
    ----------
    interim : list of (float, dict)
        The interim losses, with their metrics, that earlier attempts reported, in order.
    step : int or None
        The number of interim losses reported when the latest state was committed; ``None`` if none was.
    state : str or None
        The name of the latest state's folder, ``step-<k>.<n>``; ``None`` if none was committed.
    until : int >= 0
        The interim loss after which the evaluation ends although the loss function would go on (a step
        budget, see :class:`Inheritance`); 0 lets the loss function run to its end.
    """

    interim: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    step: int | None = None
    state: str | None = None
    until: int = 0


class Inheritance:
    """Where an evaluation's state starts, and which folders outlive their evaluation; by default none.

    A propagator whose offspring continue another evaluation's training (population-based training,
    :mod:`propulate.pbt`) hands :class:`EvaluationFolders` one of these. Every method is called on the
    worker's first rank, outside the loss function:

    - :meth:`seed` before an evaluation's first attempt, and before a later attempt whose folder holds no
      committed state (the job ended while the state was being placed): it may place a committed state in
      the folder, which the loss function then finds in :attr:`EvaluationCheckpoint.latest` and continues
      from, as from an interrupted attempt's;
    - :meth:`until` before an evaluation's later attempt: the interim loss at which it ends;
    - :meth:`keep` after a completed evaluation: whether its folder stays, for later evaluations to start
      from; a kept folder holds the :data:`INHERITABLE` file, and the keeper removes it when it is no
      longer needed;
    - :meth:`depart` when an individual leaves for another island, on the worker that sends it, and
      :meth:`arrive` when it arrives, on the first worker of its new island, before the island hears of it:
      a state on the shared file system travels with it by reference and is taken over on arrival;
    - :meth:`close` at the end of a run, once every island took in its immigrants.
    """

    def seed(self, ind: Individual, folder: Path) -> Resume | None:
        """Place the state ``ind`` starts from in its ``folder``; return what the folder holds then.

        ``None`` (the default) starts the loss function from nothing, with no step budget.
        """
        return None

    def until(self, ind: Individual) -> int:
        """Return the interim loss after which the evaluation of ``ind`` ends; 0 (the default): at its end."""
        return 0

    def keep(self, ind: Individual, folder: Path, island: Iterable[Individual]) -> bool:
        """Whether the ``folder`` of the completed ``ind`` stays; ``island`` holds the island's individuals.

        The default keeps none (beyond what ``keep_best_folders`` keeps).
        """
        return False

    def depart(
        self, traveller: Individual, emigrant: Individual, folder: Path, island: Iterable[Individual]
    ) -> None:
        """Prepare ``traveller``, a copy of ``emigrant`` (whose folder is ``folder``), to leave its island.

        It may add entries to the traveller, which is sent as it is afterwards, and keep on disk what the
        new island will take over. ``island`` holds the island's individuals. The default does nothing.
        """

    def arrive(self, traveller: Individual, folder: Path, island: Iterable[Individual]) -> None:
        """Take in ``traveller``, arrived from another island; ``folder`` is its own evaluation folder.

        Also called on a resume for every individual of the restored population (one caught in flight by
        the end of the last job is delivered then). ``island`` holds the island's individuals, ``traveller``
        included. The default does nothing.
        """

    def close(self, base: Path, island: Iterable[Individual]) -> None:
        """End of the run: remove what is no longer needed of the folders in ``base``. Nothing by default."""


class EvaluationCheckpoint:
    """The folders of one evaluation; get it with :func:`evaluation_checkpoint` inside the loss function.

    Attributes
    ----------
    uid : int
        The evaluated individual's ``uid``.
    folder : pathlib.Path
        ``<checkpoint_path>/evaluations/<uid>``, holding the folders below.
    path : pathlib.Path
        Where the loss function saves the state of its next commit (a folder, created by
        :func:`evaluation_checkpoint`, empty at the start of every step). Save everything needed to continue,
        every time: a commit replaces the previous state. With several ranks per worker, a rank other than
        the first saves for the next commit only after a collective operation of the step (a training step
        begins with one): the first rank renames the folder after the commit's agreement, while the other
        ranks already go on.
    reported : int
        Interim losses this evaluation reported in earlier attempts (0 for a first attempt).
    """

    def __init__(
        self,
        uid: int,
        folder: Path,
        resume: Resume,
        commit: Callable[[], None],
    ) -> None:
        self.uid = uid
        self.folder = folder
        self.path = folder / PENDING
        self._resume = resume
        self._commit = commit
        self.reported = len(resume.interim)
        #: Whether the loss function asked for the folders in this attempt (set by evaluation_checkpoint).
        self.asked = False
        #: Whether the loss function read :attr:`latest` in this attempt: it then continues from :attr:`step`.
        self.restored = False

    @property
    def latest(self) -> Path | None:
        """The folder of the state committed last, after :attr:`step` interim losses; ``None`` if none was.

        Reading it tells the library that the loss function continues from that state: the next interim
        loss it yields is taken as that of step ``step + 1``. A loss function that never reads it starts
        over, and its first :attr:`reported` interim losses are taken as already known.
        """
        self.restored = True
        state = self._resume.state
        return None if state is None else self.folder / state

    @property
    def step(self) -> int:
        """Interim losses reported when :attr:`latest` was committed (0 when there is none)."""
        return self._resume.step or 0

    @property
    def resuming(self) -> bool:
        """Whether an earlier attempt of this evaluation reported interim losses or committed a state."""
        return self.reported > 0 or self._resume.step is not None

    def commit(self) -> None:
        """Make what is in :attr:`path` the :attr:`latest` state; collective over a multi-rank worker.

        A generator loss function commits when it yields an interim loss, so it needs this only to commit in
        between. Call it on every rank of the worker once every rank that saves has finished saving; the
        worker's first rank renames the folder (the other ranks return without waiting for it, see
        :attr:`path`). At a stop (a signal, the time limit near) the evaluation is interrupted here, on every
        rank, once the state is committed; it continues from it on resume.
        """
        self._commit()

    def start_step(self) -> int:
        """Return the step this attempt reports from: :attr:`step` if :attr:`latest` was read, else 0."""
        return self.step if self.restored else 0


def states(folder: Path) -> list[tuple[int, int, str]]:
    """Return the committed states in ``folder`` as ``(step, commit, name)``, oldest first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted((int(m.group(1)), int(m.group(2)), name) for name in names if (m := _STATE.fullmatch(name)))


def _remove(path: Path) -> None:
    """Remove a folder and everything in it; one that is already gone is fine, one that cannot be is logged.

    A folder left behind costs disk space, not results, so the run goes on.
    """
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.warning(f"Evaluation folder {path} could not be removed: {err}")


class EvaluationFolders:
    """The evaluation folders as one rank of a worker handles them.

    The worker's first rank reads an interrupted evaluation's folder (:meth:`prepare`), records interim
    losses, commits, and removes or keeps the folder when the evaluation ends; the other ranks only name
    the folders. Only the worker that evaluated an individual ever removes its folder, so no two ranks
    remove the same one, and a kept folder is removed by the worker that kept it once the individual falls
    out of the best ``keep_best`` of its island (during the run) or of the whole run (at its end).

    Parameters
    ----------
    checkpoint_path : pathlib.Path
        The run's checkpoint folder; the evaluation folders go into its ``evaluations`` subfolder.
    root : bool
        Whether this is the worker's first rank.
    keep_best : int in [0, 100]
        How many of the best completed individuals keep their folder (their last committed state).
    inheritance : Inheritance, optional
        Where evaluations' states start and which folders outlive them (default: from nothing, none).
    """

    def __init__(
        self, checkpoint_path: Path, root: bool, keep_best: int = 0, inheritance: Inheritance | None = None
    ) -> None:
        self.base = Path(checkpoint_path) / FOLDER
        self.root = root
        self.keep_best = keep_best
        self.inheritance = inheritance if inheritance is not None else Inheritance()
        #: The folders of the evaluation under way, made when first asked for (most evaluations never do).
        self.current: EvaluationCheckpoint | None = None
        self._uid = -1
        self._resume: Resume | None = None
        self._commit: Callable[[], None] = _nothing
        self._kept: dict[int, float] = {}  # uid -> loss of the folders this worker keeps
        self._existed = False  # the current evaluation's folder existed when it began
        self._committed = False  # the current evaluation committed a state
        #: Whether this worker's last evaluation committed a state, so that the next probably will: it is
        #: worth starting even when it cannot end before the time limit (it continues in the next job).
        self.resumable = False

    def folder(self, uid: int) -> Path:
        """Return the folder of the individual ``uid``."""
        return self.base / str(uid)

    def prepare(self, ind: Individual, redo: bool) -> Resume | None:
        """Worker root: read what an earlier attempt of ``ind`` left; ``None`` for a first attempt.

        Only an individual evaluated again after an interruption (``redo``) is looked up, so a first
        evaluation costs no file system access (unless the :class:`Inheritance` places a state). What the
        interrupted attempt had half saved for its next commit is removed here, before the worker's other
        ranks hear of the evaluation: once they do, their loss function may save into
        :attr:`EvaluationCheckpoint.path` (the shards of a sharded model) while this rank is still on its
        way to the loss function.
        """
        if not redo and type(self.inheritance).seed is Inheritance.seed:
            return None  # nothing to read, nothing placed: the folder's name is not even built
        resume = self._read(ind, redo)
        if resume is not None:
            self.discard(ind.uid)
        return resume

    def discard(self, uid: int) -> None:
        """Worker root: remove what an interrupted attempt of ``uid`` saved and never committed."""
        _remove(self.folder(uid) / PENDING)

    def _read(self, ind: Individual, redo: bool) -> Resume | None:
        folder = self.folder(ind.uid)
        if not redo or not folder.is_dir():
            return self.inheritance.seed(ind, folder)
        interim: list[tuple[float, dict[str, float]]] = []
        try:
            for entry in json.loads((folder / INTERIM).read_text()):
                metrics = {str(k): float(v) for k, v in entry["metrics"].items()}
                interim.append((float(entry["loss"]), metrics))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning(f"Evaluation folder {folder}: {INTERIM} is unreadable ({err}); losses reported anew")
            interim = []
        # A state of a later step than the losses recorded cannot be (they are written first); ignored.
        found = [state for state in states(folder) if state[0] <= len(interim)]
        if not found:
            return self.inheritance.seed(ind, folder) or Resume(interim)
        return Resume(interim, found[-1][0], found[-1][2], self.inheritance.until(ind))

    def begin(self, uid: int, resume: Resume | None, commit: Callable[[], None]) -> None:
        """Every rank: make the folders of ``uid`` those that :func:`evaluation_checkpoint` returns.

        ``commit`` is what :meth:`EvaluationCheckpoint.commit` calls. Nothing is made before the loss
        function asks for it.
        """
        global _active
        self._uid, self._resume, self._commit = uid, resume, commit
        self._existed = resume is not None
        self._committed = False
        self.current = None
        _active = self

    def checkpoint(self) -> EvaluationCheckpoint:
        """Return the current evaluation's :class:`EvaluationCheckpoint` (made on the first call)."""
        if self.current is None:
            folder = self.folder(self._uid)
            self.current = EvaluationCheckpoint(self._uid, folder, self._resume or Resume(), self._commit)
        return self.current

    def end(self) -> None:
        """Every rank: the evaluation is over (:func:`evaluation_checkpoint` gives throwaway folders now)."""
        global _active
        _active = None

    @property
    def used(self) -> bool:
        """Whether the current evaluation has a folder (asked for now, or left by an earlier attempt)."""
        current = self.current
        return (current is not None and current.asked) or self._existed

    def start_step(self) -> int:
        """Return the step the current evaluation continues from (:meth:`EvaluationCheckpoint.start_step`)."""
        return self.current.start_step() if self.current is not None else 0

    def record(self, interim: list[tuple[float, dict[str, float]]]) -> None:
        """Worker root: write the interim losses reported so far (atomically replacing the last list)."""
        entries = [{"loss": loss, "metrics": metrics} for loss, metrics in interim]
        folder = self.checkpoint().folder
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{INTERIM}.tmp"
        # JSON's NaN extension: an interim loss may be NaN (it cancels the run, and is its last one).
        temporary.write_text(json.dumps(entries))
        os.replace(temporary, folder / INTERIM)

    def commit(self, step: int) -> bool:
        """Worker root: make the pending state the state after ``step`` interim losses; whether there was one.

        An empty or missing ``pending`` folder commits nothing (the previous state stays the latest).
        """
        current = self.checkpoint()
        pending = current.path
        try:
            with os.scandir(pending) as entries:
                if next(entries, None) is None:
                    return False
        except FileNotFoundError:
            return False
        committed = states(current.folder)
        # A new name, never the name of a state already there: that one stays complete until replaced.
        number = 1 + max((n for k, n, _ in committed if k == step), default=0)
        name = f"step-{step:08d}.{number:06d}"
        os.rename(pending, current.folder / name)
        for _, _, old in committed:
            _remove(current.folder / old)
        pending.mkdir(exist_ok=True)  # another rank of the worker may have asked for it meanwhile
        current._resume.step = step
        current._resume.state = name
        self._committed = True
        return True

    def finish(
        self, ind: Individual, completed: bool, interrupted: bool, island: Iterable[Individual]
    ) -> None:
        """Worker root, after an evaluation: keep its folder or remove it, and prune the kept ones.

        Parameters
        ----------
        ind : Individual
            The evaluated individual, with its loss.
        completed : bool
            Whether the evaluation completed (only completed individuals keep their folder).
        interrupted : bool
            Whether it was interrupted: its folder stays for the next attempt.
        island : iterable of Individual
            The island's population as this worker knows it, ``ind`` included.
        """
        used = self.used
        self.current = None
        self.resumable = self._committed
        if interrupted or not used:
            return
        folder = self.folder(ind.uid)
        if completed and self.inheritance.keep(ind, folder, island):
            return
        if completed and self.keep_best > 0:
            _remove(folder / PENDING)
            self._kept[ind.uid] = ind.loss
            self.settle(island)
        else:
            _remove(folder)

    def departed(
        self, travellers: list[Individual], emigrants: list[Individual], island: Iterable[Individual]
    ) -> None:
        """Worker root: ``travellers``, copies of ``emigrants``, leave (:meth:`Inheritance.depart`)."""
        pool = list(island)
        for traveller, emigrant in zip(travellers, emigrants, strict=True):
            self.inheritance.depart(traveller, emigrant, self.folder(emigrant.uid), pool)

    def arrived(self, travellers: Iterable[Individual], island: Iterable[Individual]) -> None:
        """Island's first worker: ``travellers`` arrived (:meth:`Inheritance.arrive`), untold yet."""
        if type(self.inheritance).arrive is Inheritance.arrive:
            return
        pool = list(island)
        for traveller in travellers:
            self.inheritance.arrive(traveller, self.folder(traveller.uid), pool)

    def close(self, island: Iterable[Individual]) -> None:
        """Worker root, at the end of a run: let the inheritance remove what nobody needs any more."""
        self.inheritance.close(self.base, island)

    def settle(self, best: Iterable[Individual]) -> None:
        """Worker root: remove the kept folders of individuals no longer among the ``keep_best`` best.

        ``best`` holds individuals from which the best ``keep_best`` distinct completed ones are taken (the
        island's population during the run, the run's best at its end); ties with the last of them keep
        their folder.
        """
        if not self._kept:
            return
        threshold = _kept_threshold(best, self.keep_best)
        for uid, loss in list(self._kept.items()):
            if not loss <= threshold:
                _remove(self.folder(uid))
                del self._kept[uid]


def _kept_threshold(individuals: Iterable[Individual], keep_best: int) -> float:
    """Return the loss of the ``keep_best``-th best distinct completed individual (infinite if fewer).

    A completed individual keeps its folder while its loss is at most this (ties with the last keep theirs).
    """
    from ..population import distinct_best

    top = distinct_best(individuals, keep_best)
    return top[-1].loss if len(top) == keep_best else math.inf


def sweep(
    checkpoint_path: Path, requeued: Iterable[int], individuals: Iterable[Individual], keep_best: int
) -> int:
    """Remove the evaluation folders that a new session does not need; return how many were removed.

    Kept are the folders of the individuals to evaluate again (``requeued`` uids) and, with ``keep_best``,
    those of completed individuals whose loss is within the best ``keep_best`` of ``individuals``; removed
    are those of finished evaluations whose job ended before it could remove them, and of evaluations that
    never reached the checkpoint; of those that hold the :data:`INHERITABLE` file (their keeper removes them)
    only the ones of individuals that ``individuals`` does not hold (the job was killed before their record
    was written: nobody keeps them). Run by the first worker root before any worker begins to evaluate, so
    no state is being copied: the pins that the end of the last job left in inheritable folders are
    removed, and so are leases (:data:`LEASE`) of individuals that ``individuals`` does not hold or whose
    own folder holds their state already (a lease of a traveller still to be taken over stays).
    """
    from ..individual import Status

    base = Path(checkpoint_path) / FOLDER
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return 0
    keep = {str(uid) for uid in requeued}
    pool = list(individuals)
    if keep_best > 0:
        threshold = _kept_threshold(pool, keep_best)
        keep |= {str(ind.uid) for ind in pool if ind.status is Status.COMPLETED and ind.loss <= threshold}
    removed = 0
    known = {str(ind.uid) for ind in pool}
    for name in names:
        inheritable = not name.startswith(".") and (base / name / INHERITABLE).exists()
        if name not in keep and (base / name).is_dir() and (not inheritable or name not in known):
            _remove(base / name)
            removed += 1
        elif inheritable:
            _unpin(base, name, known)
    return removed


def _unpin(base: Path, name: str, known: set[str]) -> None:
    """Remove the pins the end of a job left in the inheritable folder ``name``, and leases of no use."""
    for entry in os.listdir(base / name):
        if not entry.startswith(PIN):
            continue
        traveller = entry[len(LEASE) :] if entry.startswith(LEASE) else None
        if traveller in known and not (base / traveller / INHERITABLE).exists():
            continue  # its traveller is still to be taken over on its new island
        (base / name / entry).unlink(missing_ok=True)


def committed(checkpoint_path: str | Path) -> dict[int, tuple[int, int]]:
    """Return, per unfinished or kept evaluation folder, the ``(step, commit)`` of its latest state.

    A batch script compares two readings to tell whether a job moved a training on although no evaluation
    finished in it (a training longer than a job): a folder's ``(step, commit)`` only ever grows, and a
    folder goes away only when its evaluation finished. Needs no MPI.

    Parameters
    ----------
    checkpoint_path : str or pathlib.Path
        The run's checkpoint folder.

    Returns
    -------
    dict[int, tuple[int, int]]
        ``{uid: (step, commit)}`` for each folder with a committed state; empty when there are none.
    """
    base = Path(checkpoint_path) / FOLDER
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return {}
    progress = {}
    for name in names:
        found = states(base / name)
        if found and name.lstrip("-").isdigit():
            progress[int(name)] = found[-1][:2]
    return progress
