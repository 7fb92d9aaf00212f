"""Planning a session: read the checkpoint, merge its files, and decide what each worker starts with.

Each worker root reads a share of the files; the first merges them and decides what every worker starts
with — its island's population, its generation counter, its interrupted evaluations and (same layout) its RNG
and propagator state. Redistribution onto a changed layout is :func:`plan_resume`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..individual import Individual, loss_order
from ..migration import same_topology_setting, topology_setting_words
from ..objectives import Objectives
from ..space import SearchSpace
from .compaction import compact
from .evaluations import FOLDER as EVALUATION_FOLDERS
from .evaluations import sweep
from .format import PLAN_DTYPE, RESUME_DTYPE, CheckpointError, Listing, list_files
from .reader import Checkpoint, assemble, collect, read_outcome

__all__ = ["ResumePlan", "SessionPlan", "archive", "plan_resume", "plan_session", "read_shared", "share_plan"]

log = logging.getLogger("propulate")


def read_shared(
    comm: Any, directory: Path, resume: bool
) -> tuple[Listing, list[dict[str, Any]], list[Path]] | None:
    """Read the checkpoint files in ``directory``, each rank of ``comm`` a share (collective over ``comm``).

    Rank 0 lists the files and receives what every rank read, so the files one process opens do not grow
    with the number of files. Returns, on rank 0, the listing, the contents of the files in the order their
    records apply and the files that hold no record; ``None`` on the other ranks, and on every rank when not
    ``resume``.

    Raises
    ------
    CheckpointError
        On rank 0 only, once every rank took part, if a file that may hold records cannot be read.
    """
    listing = list_files(directory) if resume and comm.rank == 0 else None
    paths = None
    if listing is not None:
        with_state = listing.with_state
        paths = [(str(path), path in with_state) for path in listing.paths]
    paths = comm.bcast(paths, root=0)
    if paths is None:
        return None
    share = [
        (i, read_outcome(Path(paths[i][0]), paths[i][1])) for i in range(comm.rank, len(paths), comm.size)
    ]
    gathered = comm.gather(share, root=0)
    if comm.rank != 0:
        return None
    assert listing is not None and gathered is not None
    outcomes = [
        outcome for _, outcome in sorted((item for part in gathered for item in part), key=lambda x: x[0])
    ]
    return listing, *collect(listing.paths, outcomes)


@dataclass
class SessionPlan:
    """What every worker root starts a session with.

    Attributes
    ----------
    session : int
        The session's number.
    limits : dict or None
        The search space's limits; ``None`` when neither the propagator nor a checkpoint tells.
    payloads : list[dict]
        Per worker root (rank among the worker roots): ``counter`` (generation counter), ``requeue``
        (interrupted individuals to evaluate first), ``state`` (RNG and propagator state, or ``None``) and,
        for an island's first worker, ``population``.
    resume_table : numpy.ndarray or None
        Where a resume placed every individual (:data:`~.format.RESUME_DTYPE`); ``None`` for a fresh start.
    plan_table : numpy.ndarray
        Every worker's generation counter (:data:`~.format.PLAN_DTYPE`), written by the first writer before
        any other writer starts.
    fresh : bool
        A fresh start was asked for: the earlier files are to be moved aside (:func:`archive`) when the
        session begins.
    holds : str or None
        What the checkpoint holds and how it is resumed, for the log; ``None`` when there is none.
    previous : dict or None
        The settings the checkpoint was written with (its configuration), ``None`` when there is none.
    """

    session: int
    limits: dict[str, Any] | None
    payloads: list[dict[str, Any]]
    resume_table: np.ndarray | None
    plan_table: np.ndarray
    fresh: bool = False
    holds: str | None = None
    previous: dict[str, Any] | None = None


#: Settings compared with the checkpoint's at a resume, with the words the log uses for them.
COMPARED = {
    "generations": "generations",
    "island_counts": "workers per island",
    "ranks_per_worker": "ranks per worker",
    "propagator": "propagator",
    "migration_prob": "migration probability per worker",
    "pollination": "pollination",
    "migration_topology": "migration topology",
}


def _same_setting(key: str, old: Any, new: Any) -> bool:
    """Whether setting ``key`` is the same in the checkpoint (``old``) and in this run (``new``)."""
    if key == "migration_topology":
        # A name and the array it builds are the same: checkpoints of old versions stored the array.
        return same_topology_setting(old, new)
    return bool(old == new)


def _setting_words(key: str, value: Any) -> str:
    """Return a setting's value as the log shows it: a large topology array by its shape, not its entries."""
    return topology_setting_words(value) if key == "migration_topology" else repr(value)


def describe_session(plan: SessionPlan, settings: dict[str, Any], directory: Path) -> list[tuple[int, str]]:
    """Return what the log says when a session begins, as ``(level, message)`` pairs; first rank only.

    One line says what the checkpoint holds and what this run will do: the evaluations planned
    (``generations`` per worker), those the checkpoint already holds, those left. A resumed run with nothing
    left to do gets a warning that says how to search again, and settings that differ from the
    checkpoint's (:data:`COMPARED`) a warning that names each, with its old and new value (a migration
    topology by its name, or as an array: its rows up to 8 islands, else its shape).

    Parameters
    ----------
    plan : SessionPlan
        The session's plan.
    settings : dict
        This run's configuration, as the checkpoint writer stores it (``generations``, ``island_counts``,
        ...).
    directory : pathlib.Path
        The checkpoint directory.
    """
    generations = int(settings["generations"])
    workers = len(plan.plan_table)
    counters = plan.plan_table["generation_start"].astype(np.int64)
    done = int(counters.sum())
    if generations < 0:
        will = f"{workers} worker(s) evaluate until stopped"
        left = None
    else:
        left = int(np.maximum(generations - counters, 0).sum())
        planned = workers * generations
        will = f"{workers} worker(s) x {generations} generation(s) = {planned} evaluation(s) planned"
    if plan.holds is None:
        lines = [(logging.INFO, f"Run: a new search in {directory}; {will}.")]
    else:
        todo = "" if left is None else f", {done} done, {left} left"
        lines = [(logging.INFO, f"Run: {plan.holds}; {will}{todo}.")]
        # An interrupted evaluation is done again whatever the counters say (they count it already).
        redo = sum(len(payload["requeue"]) for payload in plan.payloads)
        if left == 0 and redo == 0:
            lines.append(
                (
                    logging.WARNING,
                    f"Run: nothing left to do: the checkpoint in {directory} already holds the evaluations "
                    f"of generations={generations}. To search further raise generations; to start a new "
                    "search pass resume=False (or set PROPULATE_RESUME=0) or another checkpoint_path.",
                )
            )
    if plan.previous is not None:
        changed = [
            f"{words} {_setting_words(key, plan.previous[key])} -> {_setting_words(key, settings[key])}"
            for key, words in COMPARED.items()
            if key in plan.previous and not _same_setting(key, plan.previous[key], settings[key])
        ]
        if changed:
            lines.append(
                (
                    logging.WARNING,
                    f"Run: settings differ from the checkpoint's: {'; '.join(changed)}. This run uses its "
                    "own; the loss function's own settings (epochs, data) cannot be compared: if they "
                    "changed, start a new search in another checkpoint_path.",
                )
            )
    return lines


def plan_session(
    directory: Path,
    read: tuple[Listing, list[dict[str, Any]], list[Path]] | None,
    space: SearchSpace | None,
    island_counts: Iterable[int],
    pollination: bool,
    objectives: Objectives | None = None,
) -> SessionPlan:
    """Plan a session: a resume from what :func:`read_shared` read, or a fresh start when it read nothing.

    A resume first merges the checkpoint's files into one (:func:`~.compaction.compact`), so that each
    session starts from one file plus its own. A fresh start writes nothing yet: the earlier files are moved
    aside when the session begins (:attr:`SessionPlan.fresh`, :func:`archive`).

    Raises
    ------
    CheckpointError
        If a file cannot be read, or the checkpoint was made for another search space than ``space`` or
        for other ``objectives`` (another number, names or directions).
    OSError
        If the directory cannot be written.
    """
    plan = None
    holds: str | None = None
    previous: dict[str, Any] | None = None
    counts = [int(c) for c in island_counts]
    if read is not None:
        listing, files, empty = read
        checkpoint = assemble(directory, files)
        if checkpoint is not None:
            if space is not None and checkpoint.space.fingerprint != space.fingerprint:
                raise CheckpointError(
                    f"the checkpoint in {directory} was made for another search space: it holds "
                    f"{checkpoint.space.limits}, this run searches {space.limits}. Use another "
                    "checkpoint_path, or start fresh (resume=False or PROPULATE_RESUME=0)."
                )
            stored = Objectives.of(checkpoint.config.get("objectives"))
            if stored != objectives:
                raise CheckpointError(
                    f"the checkpoint in {directory} was made for other objectives: it holds "
                    f"{stored or 'one loss'}, this run has {objectives or 'one loss'}. Use another "
                    "checkpoint_path, or start fresh (resume=False or PROPULATE_RESUME=0)."
                )
            space = space or checkpoint.space
            compact(directory, listing, (files, empty), checkpoint)
            plan = plan_resume(checkpoint, counts, pollination)
            holds, previous = plan.description, checkpoint.config
        else:
            compact(directory, listing, (files, empty))
        session = listing.next_session
    else:
        session = 0
    workers = [(island, rank) for island, size in enumerate(counts) for rank in range(size)]
    payloads = []
    plan_table = np.zeros(len(workers), dtype=PLAN_DTYPE)
    for writer, key in enumerate(workers):
        counter = 0 if plan is None else plan.counters.get(key, 0)
        plan_table[writer] = (*key, counter)
        payloads.append(
            {
                "counter": counter,
                "requeue": [] if plan is None else plan.requeue.get(key, []),
                "state": None if plan is None else plan.states.get(key),
                "population": None if plan is None or key[1] != 0 else plan.populations.get(key[0], []),
            }
        )
    resume_table = None if plan is None else plan.resume_table()
    limits = None if space is None else space.limits
    return SessionPlan(
        session,
        limits,
        payloads,
        resume_table,
        plan_table,
        fresh=read is None,
        holds=holds,
        previous=previous,
    )


def share_plan(
    roots: Any,
    island: Any,
    directory: Path,
    resume: bool,
    space: SearchSpace | None,
    island_counts: Iterable[int],
    pollination: bool,
    objectives: Objectives | None = None,
) -> tuple[str | None, SessionPlan | None, dict[str, Any]]:
    """Read the checkpoint and hand every worker root its part of the plan; collective over ``roots``.

    ``roots`` holds the worker roots, ``island`` those of this worker's island. The roots read the files,
    each a share (:func:`read_shared`); the first plans the session (:func:`plan_session`), and every root
    receives its part. Nothing is written but the merge of the files.

    Returns
    -------
    error : str or None
        Why the checkpoint cannot be used, the same on every root; ``None`` if it can.
    plan : SessionPlan or None
        The plan, on the first root; ``None`` elsewhere.
    part : dict
        This root's part: ``session``, ``limits``, and of its :attr:`SessionPlan.payloads` entry ``counter``,
        ``requeue``, ``state`` and its island's ``population``. Empty after an error.
    """
    plan = None
    header: dict[str, Any] | None = None
    payloads: list[dict[str, Any]] | None = None
    try:
        # Every root reads its share; only the first raises, once all have taken part.
        read = read_shared(roots, directory, resume)
    except CheckpointError as err:
        header = {"error": str(err)}  # raised again as a CheckpointError: its name once is enough
    if roots.rank == 0 and header is None:
        try:
            plan = plan_session(directory, read, space, island_counts, pollination, objectives)
            header, payloads = {"session": plan.session, "limits": plan.limits}, plan.payloads
        except (CheckpointError, OSError, ValueError) as err:
            header = {"error": _described(err)}
    header = roots.bcast(header, root=0)
    assert header is not None
    if "error" in header:
        return str(header["error"]), plan, {}
    part = {**header, **roots.scatter(payloads, root=0)}
    part["population"] = island.bcast(part["population"], root=0) or []
    return None, plan, part


def archive(directory: Path) -> None:
    """Start fresh as asked: move every earlier checkpoint file into a ``previous-<time>`` folder.

    The evaluation folders (:mod:`.evaluations`) go with them.
    """
    listing = list_files(directory)
    files = [*listing.paths, *listing.stale]
    if (directory / EVALUATION_FOLDERS).is_dir():
        files.append(directory / EVALUATION_FOLDERS)
    if not files:
        log.info(f"Checkpoint: starting fresh as asked; none in {directory}.")
        return
    archive = directory / time.strftime("previous-%Y%m%d-%H%M%S")
    archive.mkdir(exist_ok=True)
    for path in files:
        path.rename(archive / path.name)
    log.info(f"Checkpoint: starting fresh as asked; {len(files)} earlier file(s) moved to {archive}.")


def tidy_evaluation_folders(plan: SessionPlan, directory: Path, keep_best: int) -> None:
    """Remove the evaluation folders that the session ``plan`` does not need (see :func:`.evaluations.sweep`).

    Kept: those of the individuals evaluated again first, and of the ``keep_best`` best completed ones.
    """
    requeued = [ind.uid for payload in plan.payloads for ind in payload["requeue"]]
    individuals = [ind for payload in plan.payloads for ind in payload.get("population") or ()]
    removed = sweep(directory, requeued, individuals, keep_best)
    if removed:
        log.info(f"Checkpoint: {removed} evaluation folder(s) of finished evaluations removed.")


@dataclass
class ResumePlan:
    """Where the individuals of a checkpoint go in a new layout, and what each new worker starts with.

    Attributes
    ----------
    populations : dict[int, list[Individual]]
        The population of each new island.
    requeue : dict[tuple[int, int], list[Individual]]
        Interrupted individuals each new worker ``(island, island_rank)`` evaluates again first.
    counters : dict[tuple[int, int], int]
        Each new worker's generation counter.
    states : dict[tuple[int, int], dict]
        Writer states carried over (same layout only).
    same_layout : bool
        Whether the islands and their sizes are unchanged.
    description : str
        What happened, for the log.
    """

    populations: dict[int, list[Individual]]
    requeue: dict[tuple[int, int], list[Individual]]
    counters: dict[tuple[int, int], int]
    states: dict[tuple[int, int], dict[str, Any]]
    same_layout: bool
    description: str

    def resume_table(self) -> np.ndarray:
        """Return the island, responsible worker and activity of every individual at the session's start."""
        everyone = [(ind, island) for island, inds in self.populations.items() for ind in inds]
        everyone += [(ind, island) for (island, _), inds in self.requeue.items() for ind in inds]
        table = np.zeros(len(everyone), dtype=RESUME_DTYPE)
        for i, (ind, island) in enumerate(everyone):
            table[i] = (ind.uid, island, ind.current, ind.active)
        return table


def plan_resume(checkpoint: Checkpoint, island_counts: Iterable[int], pollination: bool) -> ResumePlan:
    """Redistribute a checkpoint onto a (possibly different) layout of islands and workers.

    With the same islands and sizes every worker gets back its generation counter, its RNG and propagator
    state and its interrupted evaluations. Otherwise the islands are mapped: with ``m`` old and ``n`` new
    islands, old island ``k`` goes to new island ``k mod n`` when ``n <= m`` (islands merge), and when
    ``n > m`` its individuals are dealt in turn to the new islands ``j`` with ``j mod m == k`` (islands
    split). The generations already done are shared as evenly as possible among the new workers, and each
    island's responsibilities (``current``) and interrupted evaluations are dealt in turn to its workers.
    Emigrants caught in flight by the end of the last session are delivered to their target island; with
    pollination each one replaces the worst active individual there.

    Parameters
    ----------
    checkpoint : Checkpoint
        What :func:`load_checkpoint` returned.
    island_counts : iterable of int
        Workers per island of the new layout.
    pollination : bool
        Whether the new run uses pollination.

    Returns
    -------
    ResumePlan
        Where everything goes.
    """
    counts = [int(c) for c in island_counts]
    old_counts = [int(c) for c in checkpoint.config.get("island_counts", [])]
    same = counts == old_counts
    n_new, n_old = len(counts), max(len(old_counts), 1)
    populations: dict[int, list[Individual]] = {j: [] for j in range(n_new)}
    pending: dict[int, list[Individual]] = {j: [] for j in range(n_new)}

    def target(old_island: int, serial: int) -> int:
        if same or n_new <= n_old:
            return old_island % n_new
        choices = list(range(old_island % n_old, n_new, n_old))
        return choices[serial % len(choices)]

    for source, destination in ((checkpoint.populations, populations), (checkpoint.pending, pending)):
        for old_island in sorted(source):
            for serial, ind in enumerate(sorted(source[old_island], key=lambda ind: ind.uid)):
                destination[target(old_island, serial)].append(ind)
    delivered = 0
    for old_island in sorted(checkpoint.in_transit):
        for ind in checkpoint.in_transit[old_island]:
            island = target(old_island, ind.uid)
            if pollination:
                active = [other for other in populations[island] if other.active]
                if active:
                    max(active, key=loss_order).active = False
            populations[island].append(ind)
            delivered += 1

    requeue: dict[tuple[int, int], list[Individual]] = {}
    counters: dict[tuple[int, int], int] = {}
    states: dict[tuple[int, int], dict[str, Any]] = {}
    if same:
        for key, info in checkpoint.writers.items():
            counters[key] = info.generation_end
            if info.state is not None:
                states[key] = info.state
        for island, inds in pending.items():
            for ind in inds:
                requeue.setdefault((island, ind.rank if 0 <= ind.rank < counts[island] else 0), []).append(
                    ind
                )
    else:
        workers = [(island, rank) for island, size in enumerate(counts) for rank in range(size)]
        share, extra = divmod(checkpoint.generations_done, len(workers))
        for i, key in enumerate(workers):
            counters[key] = share + (1 if i < extra else 0)
        for island, inds in populations.items():
            for serial, ind in enumerate(inds):
                ind.current = serial % counts[island]
        for island, inds in pending.items():
            for serial, ind in enumerate(inds):
                requeue.setdefault((island, serial % counts[island]), []).append(ind)
    n_individuals = sum(len(inds) for inds in populations.values())
    n_pending = sum(len(inds) for inds in pending.values())
    if same:
        layout = f"the same layout ({n_new} island(s) of sizes {counts})"
    else:
        how = "merged" if n_new < n_old else "split" if n_new > n_old else "kept"
        layout = (
            f"a new layout: {n_old} island(s) of sizes {old_counts} -> {n_new} island(s) of sizes {counts} "
            f"(islands {how}); {checkpoint.generations_done} generation(s) done are shared among "
            f"{sum(counts)} worker(s), and RNG and propagator states start anew"
        )
    description = (
        f"resuming from {checkpoint.directory} ({checkpoint.sessions} earlier session(s)) onto {layout}: "
        f"{n_individuals} individual(s), {n_pending} interrupted evaluation(s) to redo, "
        f"{delivered} emigrant(s) delivered that were in flight"
    )
    return ResumePlan(populations, requeue, counters, states, same, description)


def _described(err: Exception) -> str:
    """Return the message of ``err``, raised again as a ``CheckpointError``: other types are named in it."""
    return str(err) if isinstance(err, CheckpointError) else f"{type(err).__name__}: {err}"
