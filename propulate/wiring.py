"""How one worker is composed from its layout and the run's settings: the parts the loop is handed.

:func:`compose` is called once per :class:`~propulate.Propulator`, on every rank (collective: it duplicates
the communicators). Every rank gets its stop coordinator, evaluator, evaluation folders, worker channel and
view of the island; a worker's root also its link to the other workers, progress counter, migration policy and
checkpoint session (:class:`RootParts`), in which the other ranks of a multi-rank worker take no part.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpi4py import MPI

from .checkpoint.evaluations import EvaluationFolders
from .checkpoint.worker import WorkerSession, resume_wanted
from .evaluation import EvaluationHooks, Evaluator
from .island_state import IslandState
from .lifecycle import StopCoordinator, release_evaluation
from .migration import IsolatedIslands, MigrationPolicy, Topology
from .mpi.layout import Layout
from .mpi.link import Arrival, IslandLink
from .mpi.messaging import Mailbox
from .mpi.worker_comm import WorkerChannel, in_collective
from .objectives import Objectives
from .progress import Progress, progress_interval
from .propagators.base import Propagator, SelectMax, SelectMin, SelectParetoBest, SelectParetoWorst
from .surrogate import Surrogate
from .trackers.base import SearchInfo
from .trackers.runner import Tracking

__all__ = ["Parts", "RootParts", "Settings", "compose"]


@dataclass(frozen=True)
class Settings:
    """A run's settings, checked (see :class:`~propulate.Propulator` for each)."""

    generations: int
    checkpoint_path: Path
    migration_topology: Any
    migration_prob: float
    emigration_propagator: Any
    immigration_propagator: Any
    pollination: bool
    objectives: Objectives | None
    resume: bool | None
    keep_best_folders: int
    accept_inf: bool
    failure_timeout: float
    grace_period: float
    time_limit: float | None


@dataclass(frozen=True)
class RootParts:
    """What a worker root is composed of besides what every rank has.

    Attributes
    ----------
    island, world : MPI.Comm
        The library's duplicates of the island's and of all worker roots' communicators.
    link : IslandLink
        Its messages to and from the other workers.
    progress : Progress
        The island's evaluations counted, the run's progress line.
    migration : IsolatedIslands or MigrationPolicy
        Whom to send where, whom immigrants replace.
    session : WorkerSession
        Its checkpoint.
    """

    island: MPI.Comm
    world: MPI.Comm
    link: IslandLink
    progress: Progress
    migration: IsolatedIslands | MigrationPolicy
    session: WorkerSession


@dataclass(frozen=True)
class Parts:
    """What every rank of a worker is composed of; ``root`` on the worker's root only."""

    worker: MPI.Comm
    stops: StopCoordinator
    folders: EvaluationFolders
    evaluator: Evaluator
    channel: WorkerChannel
    state: IslandState
    root: RootParts | None


def compose(
    layout: Layout,
    loss_fn: Callable[..., Any],
    propagator: Propagator,
    rng: random.Random,
    surrogate: Surrogate | None,
    settings: Settings,
    take: Callable[[list[Arrival]], None],
) -> Parts:
    """Build one worker's parts; collective over every rank of every worker.

    Parameters
    ----------
    layout : Layout
        This rank's communicators and islands.
    loss_fn, propagator, rng : callable, Propagator, random.Random
        As :class:`~propulate.Propulator`'s.
    surrogate : Surrogate or None
        This worker's surrogate; ``None`` without one (it then never cancels).
    settings : Settings
        The run's settings.
    take : callable
        Applies what arrived to the worker's view: called by the evaluator's hook that takes in the island's
        news during an evaluation, so that the surrogate judges interim losses with it.
    """
    # Population-based training places each interval's starting state in its folder and keeps states.
    inheritance = propagator.inheritance if isinstance(propagator, Propagator) else None
    worker = layout.worker_comm.Dup()
    root = worker.rank == 0
    folders = EvaluationFolders(settings.checkpoint_path, root, settings.keep_best_folders, inheritance)
    evaluator: Evaluator | None = None  # the stops ask it whether the loss function runs now

    def interruptible() -> bool:  # in the loss function, not in a collective (which ends itself when due)
        return evaluator is not None and evaluator.evaluating and not in_collective()

    stops = StopCoordinator(interruptible, settings.grace_period, settings.time_limit)
    parts = _join_islands(layout, worker, propagator, rng, settings, stops) if root else None
    hooks: dict[str, Any] = {"interrupting": stops.interrupting, "stop_soon": stops.stop_soon}
    hooks["check"] = stops.check
    if worker.size > 1:
        hooks.update(left=stops.leave, others_left=stops.others_left, release=release_evaluation)
    if parts is not None and surrogate is not None:
        link = parts.link
        hooks.update(
            take_news=lambda: take(link.receive_while_evaluating()), share=link.share_while_evaluating
        )
    evaluator = Evaluator(
        loss_fn,
        layout.worker_comm,
        worker,
        settings.accept_inf,
        settings.failure_timeout,
        surrogate,
        settings.objectives,
        EvaluationHooks(**hooks),
        folders,
    )
    observe = propagator.observe if isinstance(propagator, Propagator) and propagator.observes else None
    state = IslandState(
        observe,
        surrogate,
        None if parts is None else parts.session,
        None if parts is None else parts.progress,
    )
    return Parts(worker, stops, folders, evaluator, WorkerChannel(worker), state, parts)


def _join_islands(
    layout: Layout,
    worker: MPI.Comm,
    propagator: Propagator,
    rng: random.Random,
    settings: Settings,
    stops: StopCoordinator,
) -> RootParts:
    """Build a worker root's parts; collective over the worker roots."""
    island, world = layout.island_comm.Dup(), layout.propulate_comm.Dup()
    # All of a worker's messages travel on one communicator, so one poll per generation takes them in.
    mailbox = Mailbox(world)
    objectives, generations = settings.objectives, settings.generations
    loss_name = "loss" if objectives is None else f"{objectives.names[0]} (minimized)"
    planned = None if generations == -1 else generations * world.size
    head, interval = island.rank == 0, progress_interval()
    progress = Progress(
        mailbox, layout.island_index, head, planned, interval, loss_name, objectives is not None
    )
    first = int(layout.island_displs[layout.island_index])
    link = IslandLink(mailbox, first, island.size, island.rank, stops.check, stops.stopping)
    topology = Topology.of(settings.migration_topology, len(layout.island_counts))
    policy: IsolatedIslands | MigrationPolicy = IsolatedIslands()
    # Islands that send nothing may still receive, so every island of a connected model has a policy.
    if topology.any():
        emigration, immigration = settings.emigration_propagator, settings.immigration_propagator
        if objectives is not None:  # the default selections select by Pareto rank (NSGA-II's order)
            emigration = SelectParetoBest if emigration is SelectMin else emigration
            immigration = SelectParetoWorst if immigration is SelectMax else immigration
        probability, pollination = float(settings.migration_prob), settings.pollination
        filtered = isinstance(propagator, Propagator) and propagator.filters_emigrants
        policy = MigrationPolicy(
            layout.island_index,
            topology,
            probability,
            emigration,
            immigration,
            pollination,
            rng,
            island.size,
            propagator.emigrates if filtered else None,
        )
    from . import __version__

    stored = {
        "island_counts": layout.island_counts.tolist(),
        "ranks_per_worker": int(worker.size),
        "migration_topology": topology.to_json(),
        "migration_prob": float(settings.migration_prob),
        "pollination": policy.pollination,
        "propagator": repr(propagator),
        "generations": generations,
        "num_workers": int(world.size),
        "version": __version__,
        **({} if objectives is None else {"objectives": objectives.describe()}),
    }
    session = WorkerSession(
        settings.checkpoint_path,
        world,
        island,
        layout.island_index,
        layout.island_counts,
        stored,
        resume_wanted(settings.resume),
        policy.pollination,
        objectives,
        settings.keep_best_folders,
    )
    return RootParts(island, world, link, progress, policy, session)


def start_tracking(
    tracking: Tracking,
    world: MPI.Comm,
    layout: Layout,
    checkpoint_path: Path,
    objectives: Objectives | None,
    session: int,
    worker: int,
) -> None:
    """Begin a worker root's trackers for a session; collective over all worker roots.

    The first root draws the session's token (:attr:`~propulate.trackers.SearchInfo.token`) and every root
    takes it, with trackers or without, so that no root waits for one that has none. ``session`` is the
    checkpoint's session number, ``worker`` the root's index in its island.
    """
    token = world.bcast(secrets.token_hex(8) if world.rank == 0 else None, root=0)
    if not tracking:
        return
    names = ("loss",) if objectives is None else tuple(objectives.names)
    where = (layout.island_index, worker, world.rank, world.size, len(layout.island_counts))
    path = Path(checkpoint_path)
    tracking.start(
        SearchInfo(str(path.resolve()), str(token), path, names, session, *where, layout.worker_comm.size)
    )
