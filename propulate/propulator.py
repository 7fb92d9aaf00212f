"""The asynchronous loop of one worker: breed, evaluate, share, migrate — never wait for anybody.

Every worker of an island runs the same loop. It takes in whatever its island's other workers sent, breeds
one individual from the island's population with the propagator — one whose parameter values the island
does not know yet (see :mod:`propulate.breeding`) — and sends the island's other workers its news: the
result of its last evaluation and the individual it evaluates now. It evaluates it (on all ranks of a
multi-rank worker), stores it, and, with the migration probability, sends emigrants to other islands.
Generations are a per-worker counter; there is no global barrier until the end of the run, where every
message still in flight is received before ``propulate()`` returns. The one wait before breeding is
bounded: a worker far ahead of a peer whose result is overdue gives it a few milliseconds to arrive.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from .breeding import MAX_WAIT, Breeder
from .checkpoint import (
    CheckpointError,
    CheckpointWriter,
    Record,
    SessionPlan,
    archive,
    describe_session,
    make_uid,
    share_plan,
    tidy_evaluation_folders,
)
from .checkpoint.evaluations import EvaluationFolders
from .errors import RunAbortedError, RunFailedError, WorkerFailedError
from .evaluation import Evaluator, make_surrogate
from .individual import ERROR_CHARS, Individual, Status
from .lifecycle import StopConditions, Watchdog, seconds_from_environment
from .migration import IsolatedIslands, MigrationPolicy, Topology
from .mpi.alarm import Alarm, FailureReport, agree, threads_may_poll
from .mpi.dissemination import Relay, Relaying, linger
from .mpi.messaging import Backoff, Mailbox, Tag, bcast, drain, wait
from .mpi.news import IslandNews
from .mpi.worker_comm import WorkerChannel, WorkerComm, in_collective
from .objectives import Objectives, pareto_front
from .population import Population, memory_limit
from .progress import Progress
from .propagators.base import Propagator, SelectMax, SelectMin, SelectParetoBest, SelectParetoWorst
from .run_results import KEPT, RunResults, RunResultsMixin, gather_results
from .space import SearchSpace
from .surrogate import NullSurrogate
from .validation import check_int, check_probability, check_seconds

__all__ = ["Propulator"]

log = logging.getLogger("propulate")

#: Seconds a running evaluation may go on after another rank failed (at most; a shorter grace period
#: applies): every rank then raises within about this time plus what its finishing takes.
FAILURE_GRACE = 20.0

# Seconds between snapshots of a worker's state (RNG, propagator) for the checkpoint: the writer's flush
# interval, since a flush stores only the latest snapshot (a snapshot costs about 100 us after a wake-up).
_SNAPSHOT_INTERVAL = 0.25

#: How much longer than the last one a step of a committing evaluation may take before the time limit:
#: it stops at its commit if the next step, this many times as long, would not end in time. With exactly
#: the last step's time (1.0), a step slowed by a loaded node ran into the interruption and was trained
#: again on resume.
STEP_MARGIN = 1.5


def _resume_wanted(resume: bool | None) -> bool:
    if resume is not None:
        return bool(resume)
    return os.environ.get("PROPULATE_RESUME", "1").strip().lower() not in ("0", "false", "no", "off")


def _find_space(obj: object, depth: int = 0) -> SearchSpace | None:
    """Return the search space a propagator was built for (searching its operators), if it names one."""
    if isinstance(obj, SearchSpace):
        return obj
    if depth > 6:
        return None
    if isinstance(obj, Propagator):
        children: list[object] = list(vars(obj).values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    else:
        return None
    for child in children:
        found = _find_space(child, depth + 1)
        if found is not None:
            return found
    return None


class Propulator(RunResultsMixin):
    """The asynchronous evolutionary optimizer of one island's worker.

    Used directly it optimizes one island without migration; :class:`propulate.Islands` builds one per
    worker with the communicators of an island model.

    Parameters
    ----------
    loss_fn : callable
        The function minimized: ``loss_fn(params) -> float`` (or ``loss_fn(params, comm)`` with multi-rank
        workers). It may also return a mapping with a ``"loss"`` entry and further metrics, or yield interim
        losses as a generator. With several ``objectives`` it returns one value each (see there).
    propagator : Propagator
        Breeds a new individual from the island's population.
    rng : random.Random or int
        This worker's generator (seed it differently on every rank); or an int, a seed the same on every
        rank, from which each rank derives its own (:func:`propulate.utils.rank_rng`, stream 1, so that the
        same seed passed to :func:`~propulate.utils.get_default_propagator` gives it another stream).
    island_idx : int
        Index of this worker's island.
    island_comm : MPI.Comm
        The roots of the island's workers (``MPI.COMM_NULL`` on sub-ranks of multi-rank workers).
    propulate_comm : MPI.Comm
        The roots of all workers (``MPI.COMM_NULL`` on sub-ranks).
    worker_sub_comm : MPI.Comm
        The ranks of this worker; ``MPI.COMM_SELF`` for one-rank workers.
    generations : int >= -1
        Evaluations per worker; ``-1`` runs until stopped, ``0`` does nothing.
    checkpoint_path : str or pathlib.Path
        Directory for checkpoints; created if missing.
    migration_topology : {"hypercube", "complete", "ring"}, array_like of int, Topology, or None
        How many individuals island ``i`` sends to island ``j`` per migration event: a name of
        :data:`propulate.migration.TOPOLOGIES` or an int array of shape ``(num_islands, num_islands)`` (see
        :class:`propulate.Islands`). Default (``None``): ``"hypercube"``, one individual to each island
        ``(i + 2**j) mod I``, ``j < ceil(log2 I)``; Propulate 1.2.2's default was ``"complete"``.
    migration_prob : float in [0, 1]
        Probability that this worker starts a migration event after one of its generations.
    emigration_propagator : Propagator class
        Selects emigrants (default: the best, :class:`SelectMin`; with several ``objectives`` the best in
        NSGA-II's order, :class:`~propulate.propagators.SelectParetoBest`).
    island_displs, island_counts : array_like of int, optional
        For each island, the ``propulate_comm`` rank of its first worker and its number of workers.
        Default: gathered from all workers.
    surrogate_factory : callable, optional
        Called without arguments, returns the :class:`propulate.surrogate.Surrogate` of this worker, which may
        stop evaluations of a generator loss function early (see :mod:`propulate.surrogate`). Each worker's
        surrogate learns from the evaluations of every worker of its island and from immigrants, and is
        rebuilt from the checkpoint on resume. Default: no early stopping.
    immigration_propagator : Propagator class
        For pollination, selects the individuals that immigrants replace (default: the worst; with several
        ``objectives`` the worst in NSGA-II's order, :class:`~propulate.propagators.SelectParetoWorst`).
    pollination : bool
        Send copies (pollination) instead of moving individuals (migration).
    resume : bool, optional
        Continue from the checkpoint in ``checkpoint_path`` if there is one (the default), or start fresh:
        earlier checkpoint files are then moved into a ``previous-<time>`` folder. Default: the environment
        variable ``PROPULATE_RESUME`` (``0`` starts fresh), else resume. Which one happened is logged.
    on_failure : {"continue", "stop"}
        What a failed evaluation (the loss function raised, or returned NaN, an infinite loss or no number)
        does: it is marked failed, logged once with rank, host, parameters and traceback, never selected,
        and the run goes on (``"continue"``); or every rank stops, writes the checkpoint and raises
        :class:`propulate.errors.RunAbortedError` (``"stop"``). A failure's traceback is logged the first
        time the worker meets it, its repeats in one line each. A run in which evaluations failed and none
        completed raises :class:`propulate.errors.RunFailedError` at its end, also with ``"continue"``. An
        evaluation that failed because a helper of this library refused the setup inside the loss function
        (a :class:`~propulate.errors.PropulateError`, e.g. two ranks of a worker on one GPU) stops the run
        as ``"stop"`` does, whatever this says: every later evaluation would fail the same way.
    accept_inf : bool
        Count an infinite loss as a result instead of a failure.
    time_limit : float, optional
        Wall-clock budget of each ``propulate()`` call in seconds (default: the environment variable
        ``PROPULATE_TIME_LIMIT``, else none). With SLURM, the job's end time (``SLURM_JOB_END_TIME``) is a
        budget too. ``propulate()`` returns before it runs out: no evaluation starts that would not end (at
        its running mean duration) before the margin, and one still running when the margin begins is
        interrupted as by a stop signal and evaluated again on resume. An evaluation that commits its state
        (:func:`propulate.evaluation_checkpoint`) starts whenever there is time left and stops at the commit
        whose next step would not end before the margin; it continues from that state on resume. The margin is
        10 % of the budget, at least 0.5 s and at most 60 s (:func:`propulate.lifecycle.time_limit_margin`).
    grace_period : float, optional
        Seconds a running evaluation may go on after a stop signal (SIGTERM, SIGINT, SIGUSR1) before it is
        interrupted (it is evaluated again on resume); default ``PROPULATE_GRACE_PERIOD``, else 20. A second
        SIGINT interrupts at once. All ranks of a multi-rank worker are interrupted together, see
        :mod:`propulate.lifecycle` and, for MPI collectives inside the loss function,
        :mod:`propulate.mpi.worker_comm`.
    failure_timeout : float
        With multi-rank workers: seconds a rank whose loss function failed waits for the worker's other
        ranks before it aborts the job (they may be stuck in a collective operation with it that cannot be
        interrupted, see :mod:`propulate.mpi.worker_comm`).
    objectives : None, int, sequence of str, or mapping of str to {"minimize", "maximize"}
        Several objectives (see :mod:`propulate.objectives`): their number (all minimized), their names
        (minimized), or names with directions, e.g. ``{"error": "minimize", "latency_ms": "minimize"}``.
        The loss function then returns one value per objective, as a sequence in this order or as a
        mapping holding each name (further entries are metrics); another number of values fails the
        evaluation with a message that says so. Every individual keeps its losses
        (:attr:`Individual.losses`, maximized objectives negated), the checkpoint stores them and a resume
        must have the same objectives; :meth:`pareto_front` returns the run's front. Pair it with a
        multi-objective propagator, :class:`propulate.propagators.NSGA2`. Default: one loss, a number.
    keep_best_folders : int in [0, 100]
        A loss function may keep its state in a folder of its own (:func:`propulate.evaluation_checkpoint`),
        in ``checkpoint_path/evaluations``, so that an evaluation interrupted by the end of a job continues
        from it in the next. Once an evaluation finished its folder is removed, unless the individual
        completed and is among the ``keep_best_folders`` best of its island (during the run) and of the
        whole run (at its end): their last committed states, e.g. the best trained networks.

    Raises
    ------
    ValueError
        For out-of-range arguments (named in the message).
    TypeError
        If ``loss_fn`` or ``propagator`` is not callable, or ``loss_fn`` cannot take the worker communicator.
    propulate.checkpoint.CheckpointError
        On every rank, if the checkpoint in ``checkpoint_path`` cannot be used (a file cannot be read, or it
        was made for another search space).

    Notes
    -----
    Construction is collective over all ranks of all workers: it takes in the checkpoint in
    ``checkpoint_path`` (unless ``resume`` is off), so that :attr:`population` and ``generation`` hold what
    the checkpoint holds from then on, as in Propulate 1.2.2, and :meth:`summarize` works without a run.
    Nothing is written before :meth:`propulate` (see :doc:`/checkpointing`). What the surrogate factory or
    the propagator's and surrogate's hooks raise on one rank meanwhile is raised on every rank: that rank's
    exception there, :class:`propulate.errors.WorkerFailedError` naming it elsewhere.

    Memory. A worker holds what breeding needs, not the run's history, where that is exact: on an island that
    exchanges nothing with others (no migration, no pollination), with one loss and no surrogate, a propagator
    that declares a finite :attr:`~propulate.propagators.Propagator.breeding_pool` ``P`` breeds from the best
    ``P`` active individuals, and none of the others can ever be among them again. Once the worker holds
    :func:`propulate.population.memory_limit` individuals (4,096 unless ``PROPULATE_MEMORY_LIMIT`` says
    otherwise; at least twice what it keeps), it keeps the best ``2 max(P, 100, keep_best_folders)`` in memory
    and releases the rest (:meth:`propulate.population.Population.release`); they stay in the checkpoint, and
    :attr:`population` reads them back from it. The no-repeat rule keeps a key of each (a 64-bit hash: 8 to 16
    bytes per evaluation past 65,536, :class:`propulate.population.KeySet`). On resume a worker takes in its
    island's whole population from the checkpoint and releases it at once. Elsewhere (migration, pollination,
    a propagator that takes the whole population, several objectives, a surrogate) every individual stays in
    memory, as in Propulate 1.2.2.

    An exception on any rank outside the loss function (a propagator, a surrogate, the checkpoint writer)
    ends the run on every rank: the failing rank raises it, every other rank raises
    :class:`propulate.errors.WorkerFailedError` naming it, within :data:`FAILURE_GRACE` seconds plus the time
    to finish, and every rank writes its checkpoint first (:mod:`propulate.mpi.alarm`).
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        propagator: Propagator,
        rng: random.Random | int | None = None,
        island_idx: int = 0,
        island_comm: MPI.Comm = MPI.COMM_WORLD,
        propulate_comm: MPI.Comm = MPI.COMM_WORLD,
        worker_sub_comm: MPI.Comm = MPI.COMM_SELF,
        generations: int = -1,
        checkpoint_path: str | Path = "./",
        migration_topology: Any = None,
        migration_prob: float = 0.0,
        emigration_propagator: type[Propagator] | Propagator = SelectMin,
        island_displs: Any = None,
        island_counts: Any = None,
        surrogate_factory: Callable[[], Any] | None = None,
        *,
        immigration_propagator: type[Propagator] | Propagator = SelectMax,
        pollination: bool = False,
        resume: bool | None = None,
        on_failure: str = "continue",
        accept_inf: bool = False,
        time_limit: float | None = None,
        grace_period: float | None = None,
        failure_timeout: float = 300.0,
        keep_best_folders: int = 0,
        objectives: Any = None,
    ) -> None:
        self.generations = check_int("generations", generations, -1)
        self.objectives = Objectives.of(objectives)
        if check_int("keep_best_folders", keep_best_folders, 0, f"an int in [0, {KEPT}]") > KEPT:
            raise ValueError(f"keep_best_folders: expected an int in [0, {KEPT}], got {keep_best_folders!r}")
        if not callable(propagator):
            raise TypeError(f"propagator: expected a Propagator, got {type(propagator).__name__}")
        check_probability("migration_prob", migration_prob)
        if on_failure not in ("continue", "stop"):
            raise ValueError(f"on_failure: expected 'continue' or 'stop', got {on_failure!r}")
        # Batch scripts set these without touching the Python script.
        if grace_period is None:
            grace_period = seconds_from_environment("PROPULATE_GRACE_PERIOD", 20.0) or 0.0
        if time_limit is None:
            time_limit = seconds_from_environment("PROPULATE_TIME_LIMIT", None)
        check_seconds("grace_period", grace_period)
        check_seconds("failure_timeout", failure_timeout)
        if time_limit is not None:
            check_seconds("time_limit", time_limit, positive=True)
        self.on_failure = on_failure
        self._progress_interval = progress_interval()  # checked on every rank: an error must not hang
        self.time_limit = time_limit
        self.grace_period = float(grace_period)
        self.loss_fn = loss_fn
        self.propagator = propagator
        # Called with every individual that enters the population, for propagators that learn from them.
        self._observer: Callable[[Individual], None] | None = (
            propagator.observe if isinstance(propagator, Propagator) and propagator.observes else None
        )
        if isinstance(rng, int):  # a seed (rank_rng refuses a bool, naming the seed)
            from .utils import rank_rng

            rng = rank_rng(rng, stream=1)
        self.rng = rng if rng is not None else random.Random()
        self.island_idx = int(island_idx)
        self.island_comm = island_comm
        self.propulate_comm = propulate_comm
        self.worker_sub_comm = worker_sub_comm
        self.surrogate_factory = surrogate_factory
        failure: Exception | None = None  # raised on every rank once all took part (see _load_checkpoint)
        try:
            self.surrogate = make_surrogate(surrogate_factory)
        except Exception as err:
            failure, self.surrogate = err, NullSurrogate()
        self._worker = worker_sub_comm.Dup()
        self.evaluator = Evaluator(
            loss_fn,
            worker_sub_comm,
            self._worker,
            accept_inf,
            failure_timeout,
            self.surrogate,
            objectives=self.objectives,
        )
        self.is_worker_root = self._worker.rank == 0
        self._channel = WorkerChannel(self._worker)
        self.checkpoint_path = Path(checkpoint_path)
        self.checkpoint_path.mkdir(parents=True, exist_ok=True)
        self._folders = EvaluationFolders(self.checkpoint_path, self.is_worker_root, keep_best_folders)
        self.evaluator.folders = self._folders

        self._population = Population()
        self._memory_limit = memory_limit()
        # How many individuals stay in memory once the population is released; None where all must stay.
        self._retained: int | None = None
        self._in_run = False  # inside propulate(): the island's checkpoint files are being written
        self.generation = 0
        self._resume = _resume_wanted(resume)
        self._session = 0
        self._writer: CheckpointWriter | None = None
        self._generation_start = 0  # the generation counter at the start of the session
        self._requeue: list[Individual] = []
        self._last_snapshot = -math.inf
        self._stop_reason: str | None = None  # why this worker stops before its generations are done
        self._abort = False  # the stop is a failure (on_failure="stop"): raise at the end
        self._results: RunResults | None = None  # the run's best, on every rank after propulate()
        # The failures of this worker's evaluations whose traceback was logged (their last lines).
        self._errors_seen: set[str] = set()
        self._misconfigured = ""  # the error of the last evaluation if a PropulateError: the setup is wrong
        self._stop_conditions = StopConditions(
            self._interruptible, self.grace_period, time_limit, self._tell_worker_of_signal
        )
        self._alarm: Alarm | None = None  # during propulate()
        self._mean_period = 0.0  # running mean of this worker's evaluation time, seconds
        self._worker_size = int(worker_sub_comm.size)
        self._introduced = 0
        self._next_owner = 0
        self._owed_replacements = 0
        self.pollination = bool(pollination)
        self.start_time = math.nan
        self.island_rank = -1
        self._breeder = Breeder(propagator, self._population, self.rng)  # rebuilt when a session begins
        self._started = 0  # evaluations this worker started in this session
        self._collisions_likely = False  # whether announcements are confirmed in any space (see _claim)
        self._planned = False  # a session is planned (the checkpoint taken in) and not begun yet
        self._plan: SessionPlan | None = None  # the planned session, on the first worker root
        self._limits: dict[str, Any] | None = None  # the search space's, once known
        self.migration: IsolatedIslands | MigrationPolicy = IsolatedIslands()
        if self.is_worker_root:
            self._join_islands(
                island_displs,
                island_counts,
                migration_topology,
                migration_prob,
                emigration_propagator,
                immigration_propagator,
            )
        self._load_checkpoint(failure)

    def _join_islands(
        self,
        island_displs: Any,
        island_counts: Any,
        migration_topology: Any,
        migration_prob: float,
        emigration_propagator: type[Propagator] | Propagator,
        immigration_propagator: type[Propagator] | Propagator,
    ) -> None:
        """Worker roots: the island model's communicators, mailbox and progress counter, and migration."""
        self._island = self.island_comm.Dup()
        self._world = self.propulate_comm.Dup()
        # All of a worker's messages travel on one communicator, so one poll per generation takes them in.
        self._mail = Mailbox(self._world)
        self._progress = Progress(
            self._mail,
            self.island_idx,
            self._island.rank == 0,
            None if self.generations == -1 else self.generations * self._world.size,
            self._progress_interval,
            "loss" if self.objectives is None else f"{self.objectives.names[0]} (minimized)",
        )
        self.island_rank = self._island.rank
        if island_displs is None or island_counts is None:
            islands = np.asarray(self._world.allgather(self.island_idx))
            island_counts = np.bincount(islands)
            island_displs = np.concatenate(([0], np.cumsum(island_counts)[:-1]))
        self.island_displs = np.asarray(island_displs, dtype=int)
        self.island_counts = np.asarray(island_counts, dtype=int)
        # The island's other workers, by their rank in the propulate communicator.
        first = int(self.island_displs[self.island_idx])
        self._island_peers = [first + r for r in range(self._island.size) if r != self.island_rank]
        self._news = IslandNews(bool(self._island_peers))  # what the island's other workers hear next
        # News reaches the island's other workers along a tree rooted at its sender (see the module). While
        # this worker evaluates, its watchdog thread passes news on; what it took in waits there for the loop.
        self._relay = Relay(first, self._island.size, self.island_rank)
        self._relaying = Relaying(self._relay, self._mail)
        self._pace = 0.0  # seconds per generation, measured at the end of the loop
        topology = Topology.of(migration_topology, len(self.island_counts))
        self._topology = topology
        self._migration_prob = float(migration_prob)
        # Islands that send nothing may still receive, so every island of a connected model has a policy.
        if topology.any():
            if self.objectives is not None:  # several objectives: the defaults select by Pareto rank
                if emigration_propagator is SelectMin:
                    emigration_propagator = SelectParetoBest
                if immigration_propagator is SelectMax:
                    immigration_propagator = SelectParetoWorst
            self.migration = MigrationPolicy(
                self.island_idx,
                topology,
                float(migration_prob),
                emigration_propagator,
                immigration_propagator,
                self.pollination,
                self.rng,
            )
        else:
            self.migration = IsolatedIslands()
            self.pollination = False

    # ----------------------------------------------------------------------------------------------- run

    def propulate(self, logging_interval: int = 10, debug: int = -1) -> None:
        """Run the optimization; collective over all ranks of all workers.

        Each worker evaluates ``generations`` individuals; when it returns, every message has been
        received and every worker of an island holds the same population. After a stop (a signal, the time
        limit) it may be called again: it continues from the checkpoint.

        Parameters
        ----------
        logging_interval : int >= 1
            With ``debug >= 2``: generations between the progress lines of each island's first worker.
        debug : int
            Verbosity: <= 0 quiet; 1 one progress line for the whole run on the first rank, at most every
            ``PROPULATE_PROGRESS_INTERVAL`` seconds (default 10: evaluations done and planned, best loss,
            evaluations per second, time left), and the summary, ending with the run's evaluations by
            status (completed, failed, pruned, interrupted); 2 also each island's progress and every
            evaluation; 3 also migration events. Whatever it says, the first rank logs at the start what
            the checkpoint holds and what this run will do, with a warning when nothing is left to do or
            when the settings differ from the checkpoint's
            (:func:`propulate.checkpoint.session.describe_session`).

        Raises
        ------
        ValueError
            If ``logging_interval`` is not a positive int.
        RunAbortedError
            On every rank, after a failed evaluation with ``on_failure="stop"``.
        RunFailedError
            On every rank, when evaluations failed and none of the run completed, whatever ``on_failure``
            says (the checkpoint is written first). ``"continue"`` goes on past failures, but a run without
            a single result does not end as a success: Optuna's ``optimize`` likewise re-raises a failing
            objective unless told to catch it.
        WorkerFailedError
            On every rank but the failing one, when a rank failed outside the loss function (which raises
            its own exception).
        """
        check_int("logging_interval", logging_interval, 1)
        self.start_time = time.time()
        self._stop_reason = None
        self._abort = False
        conditions = self._stop_conditions
        alarm = self._alarm = Alarm(
            conditions, self._worker, self._world if self.is_worker_root else None, FAILURE_GRACE
        )
        evaluator = self.evaluator
        evaluator.interrupting = lambda: time.monotonic() >= conditions.interrupt_at
        # An evaluation that commits its state stops at the commit once a stop is under way, or when its
        # next step, STEP_MARGIN times as long as the last, would run into the moment of interruption: it
        # continues from there on resume (a step cut short is trained again).
        evaluator.stop_soon = lambda seconds: (
            conditions.reason is not None
            or time.monotonic() + STEP_MARGIN * seconds >= conditions.interrupt_at
        )
        evaluator.check = alarm.check
        if self.is_worker_root and self.surrogate_factory is not None:
            evaluator.take_news = self._receive_while_evaluating
            evaluator.share = self._share_while_evaluating
        if self._worker.size > 1:
            evaluator.left = alarm.leave
            evaluator.release = _release_torch_group
            evaluator.loss_comm = WorkerComm.of(
                self.worker_sub_comm,
                # Only the loss function calls its collectives: due once the moment of interruption passed.
                lambda: alarm.left == evaluator.count or time.monotonic() >= conditions.interrupt_at,
            )
        # Worker roots also pass island news on while they evaluate (see Relaying).
        poll = (
            (self._poll_in_background if self.is_worker_root else alarm.poll)
            if threads_may_poll()
            else _nothing
        )
        self._in_run = True
        try:
            with conditions, Watchdog(conditions, poll, _release_torch_group, lambda: evaluator.count):
                outcome = self._run(logging_interval, debug)
        except BaseException as err:
            self._fail(err)
            raise
        finally:
            alarm.close()
            _release_torch_group()
            self._in_run = False
        if outcome[0]:
            raise RunAbortedError(f"the run stopped on a failed evaluation: {outcome[1]}")
        if self._results is not None and self._results.all_failed:
            raise RunFailedError(
                f"every evaluation of the run failed ({self._results.counts_text()}); the tracebacks are in "
                f"the log and the failed individuals in the checkpoint in {self.checkpoint_path}"
            )

    def _run(self, logging_interval: int, debug: int) -> tuple[bool, str | None]:
        """Begin the session, loop (or serve the worker's root), and share the outcome with the worker."""
        check = self._check_alarm
        error = self._begin_session() if self.is_worker_root else None
        if self._worker.size > 1:
            error = bcast(self._worker, error, check)
        if error is not None:
            raise CheckpointError(error)
        if self.is_worker_root:
            self._work(logging_interval, debug)
            self._settle_stop()
            first = self.island_rank == 0
            self._results = gather_results(
                (lambda: self._island_members(KEPT)) if first else None,
                self._world,
                lambda request: wait(request, check),
                self.objectives is not None,
                self._population.evaluation_counts() if first else None,
            )
            if self._folders.keep_best:
                self._folders.settle(self._kept_best(self._folders.keep_best))
            if debug >= 1 and self._world.rank == 0:
                log.info(f"Done: {self._progress.line()}; {self._results.counts_text()}.")
        else:
            self._serve()
        outcome = (self._abort, self._stop_reason, self._results)
        if self._worker.size > 1:
            outcome = self._share_with_sub_ranks(outcome, lambda obj: bcast(self._worker, obj, check))
        self._results = outcome[2]
        return outcome[:2]

    def _share_with_sub_ranks(self, extra: Any, broadcast: Callable[[Any], Any]) -> Any:
        """Give the worker's other ranks its population and generation counter, and the root's ``extra``.

        Sub-ranks hold them too, so user code may read them on any rank. Collective over the worker with
        ``broadcast`` (from its root); returns the root's ``extra`` on every rank.
        """
        population, self.generation, extra = broadcast(
            (self._population, self.generation, extra) if self.is_worker_root else None
        )
        if not self.is_worker_root:
            self._population = population
        return extra

    def _fail(self, err: BaseException) -> None:
        """Give up on this rank: tell every rank (unless another failed first) and close the checkpoint."""
        alarm = self._alarm
        assert alarm is not None
        if not isinstance(err, WorkerFailedError):
            alarm.fail(FailureReport.of(err, "propulate()"))
            log.error(
                f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()} failed; every rank of the run stops. "
                f"{type(err).__name__}: {err}"
            )
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception as close_error:
                log.error(f"Checkpoint: closing {self._writer.path} after the failure failed: {close_error}")
            self._writer = None

    def _interruptible(self) -> bool:
        """Whether a stop may raise in the main thread now: in the loss function, not in a collective.

        A collective operation of the ``comm`` handed to the loss ends itself when due (see
        :func:`propulate.mpi.worker_comm.in_collective`).
        """
        return self.evaluator.evaluating and not in_collective()

    def _check_alarm(self) -> None:
        """Raise if another rank failed (taking in alarm messages first where no thread does)."""
        alarm = self._alarm
        assert alarm is not None
        if not threads_may_poll():
            alarm.poll()
        alarm.check()

    def _tell_worker_of_signal(self, grace_left: float) -> None:
        """Tell the worker's other ranks that a stop signal reached this rank, so that they stop with it."""
        if self._alarm is not None:
            self._alarm.stop_worker(grace_left)

    # -------------------------------------------------------------------------------- stopping early

    def _request_stop(self, reason: str, abort: bool = False) -> None:
        """Stop this worker and tell every other worker to stop (they finish their running evaluation).

        The alarm relays the request over a tree of the worker roots (:mod:`propulate.mpi.alarm`), at
        once, also while this or another worker evaluates; an abort after a stop is passed on too.
        """
        self._take_stop(reason, abort)
        assert self._alarm is not None
        self._alarm.request_stop(reason, abort)

    def _take_stop(self, reason: str, abort: bool) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
        self._abort = self._abort or abort

    def _settle_stop(self) -> None:
        """End of the loop: agree with every worker root on whether, why and how the run stopped early.

        A stop relayed by the alarm may reach a worker after it finished its generations: it counts all
        the same, as if it had arrived in time (:meth:`propulate.mpi.alarm.Alarm.settle`).
        """
        assert self._alarm is not None
        settled = self._alarm.settle(self._stop_reason, self._abort, self._check_alarm)
        if settled is not None:
            self._stop_reason, self._abort = settled

    def _should_stop(self) -> bool:
        """Check the stop conditions between two evaluations; start a stop where one holds."""
        self._check_alarm()
        assert self._alarm is not None
        request = self._alarm.stop_request  # another worker's, relayed by the alarm, or this one's
        if request is not None:
            self._take_stop(*request)
        if self._stop_reason is None:
            conditions = self._stop_conditions
            if conditions.reason is not None:
                self._request_stop(conditions.reason)
            elif conditions.out_of_time(0.0 if self._folders.resumable else self._mean_period):
                # An evaluation that commits its state starts as long as there is time: it stops at the
                # commit whose next step would not end in time, and continues from it in the next job.
                self._request_stop("the time limit is near")
        return self._stop_reason is not None

    def _serve(self) -> None:
        """Sub-ranks of a multi-rank worker: evaluate what the root hands over until it says stop."""
        while (task := self._channel.next_task(self._check_alarm)) is not None:
            self.evaluator.run_only(*task)

    # ----------------------------------------------------------------------------------- checkpoint

    def _load_checkpoint(self, failure: Exception | None) -> None:
        """Take in the checkpoint, so that the population is there from construction on, as in 1.2.2.

        Collective over all ranks of all workers: the worker roots read the checkpoint together
        (:meth:`_read_plan`), each takes its part (:meth:`_take_plan`), and each worker's root hands its
        population and generation counter to its other ranks. Taking a part runs the propagator's and the
        surrogate's hooks: what they raise on one rank, or the surrogate factory's ``failure``, is raised on
        every rank (:func:`~propulate.mpi.alarm.agree`). Raises
        :class:`~propulate.checkpoint.CheckpointError` on every rank if the checkpoint cannot be used.
        """
        error = None
        if self.is_worker_root:
            error, part = self._read_plan()
            if error is None and failure is None:
                try:
                    self._take_plan(part)
                except Exception as err:
                    failure = err
        agree(failure, self._worker, self._world if self.is_worker_root else None, "building the Propulator")
        if self._worker.size > 1:
            error = self._share_with_sub_ranks(error, lambda obj: self._worker.bcast(obj, root=0))
        if error is not None:
            raise CheckpointError(error)

    def _read_plan(self) -> tuple[str | None, dict[str, Any]]:
        """Read the checkpoint and receive this worker's part of the plan; collective over the worker roots.

        See :func:`~propulate.checkpoint.share_plan`; returns its error message and part.
        """
        self._writer = None  # the last session's, closed
        error, self._plan, part = share_plan(
            self._world,
            self._island,
            self.checkpoint_path,
            self._resume,
            _find_space(self.propagator),
            self.island_counts,
            self.pollination,
            self.objectives,
        )
        return error, part

    def _take_plan(self, part: dict[str, Any]) -> None:
        """Take this worker's part of the planned session (see :meth:`_read_plan`); this rank only.

        Calls the propagator's :meth:`~propulate.propagators.Propagator.bind`, ``observe`` and
        ``load_state_dict`` and the surrogate's ``merge``, so it may raise what they raise.
        """
        if isinstance(self.propagator, Propagator):
            self.propagator.bind(self.island_rank, self._island.size)
        self._session = int(part["session"])
        self._limits = part["limits"]
        self._introduced = 0
        self.generation = self._generation_start = int(part["counter"])
        self._requeue = list(part["requeue"])
        for ind in self._requeue:
            ind.current = self.island_rank
        self._population = Population()
        self._population.extend(part["population"])
        self._learn_from(self._population)
        # The propagator learns the restored population first; a saved state then replaces what it
        # rebuilt from it (see Propagator.observe).
        self._observe(self._population)
        # What stays in memory is decided here, once per session (every session takes its plan in here),
        # and a restored population past the limit is released at once: the worker's other ranks receive
        # the store as it is now.
        self._retained = self._retention()
        self._release()
        state = part["state"]
        if state is not None:
            self.rng.setstate(state["rng"])
            if isinstance(self.propagator, Propagator):
                self.propagator.load_state_dict(state["propagator"])
            self._owed_replacements = int(state["owed_replacements"])
            self._next_owner = int(state["next_owner"])
        self._planned = True

    def _begin_session(self) -> str | None:
        """Begin the planned session (planning one first unless construction did); collective over the roots.

        The first worker root creates its file, which holds every worker's generation counter, before any
        other worker starts; a fresh start (``resume=False``) first moves the earlier files aside. Returns an
        error message, the same on every worker root, or ``None``.
        """
        if not self._planned:
            error, part = self._read_plan()
            if error is not None:
                return error
            self._take_plan(part)
        self._planned = False
        error = None
        plan = self._plan  # on the first worker root
        if plan is not None:
            try:
                if plan.fresh:
                    archive(self.checkpoint_path)
                else:
                    tidy_evaluation_folders(plan, self.checkpoint_path, self._folders.keep_best)
                if plan.limits is not None:
                    counter = int(plan.payloads[0]["counter"])
                    space = SearchSpace.of(plan.limits)
                    self._open_writer(space, counter, plan.resume_table, plan.plan_table)
                for level, line in describe_session(plan, self._settings(), self.checkpoint_path):
                    log.log(level, line)
            except (CheckpointError, OSError, ValueError) as err:
                error = str(err) if isinstance(err, CheckpointError) else f"{type(err).__name__}: {err}"
        error = self._world.bcast(error, root=0)
        if error is not None:
            return str(error)
        # A later propulate() call on this object continues from what this session writes.
        self._resume = True
        self._breeder = Breeder(
            self.propagator,
            self._population,
            self.rng,
            f"Island {self.island_idx}, worker {self.island_rank}",
            loud=self.island_rank == 0,
            space=None if self._limits is None else SearchSpace.of(self._limits),
        )
        self._breeder.expect(self._island_peers, time.monotonic())
        self._started = 0
        # Whether workers of the island may well breed the same configuration at once (see _claim).
        propagator = self.propagator
        self._collisions_likely = isinstance(propagator, Propagator) and propagator.replicated
        self._progress.begin(self._population)
        if self._limits is not None and self._writer is None:
            self._open_writer(SearchSpace.of(self._limits), self._generation_start)
        return None

    def _settings(self) -> dict[str, Any]:
        """Return this run's settings as the checkpoint stores them (JSON values)."""
        from . import __version__

        return {
            "island_counts": self.island_counts.tolist(),
            "ranks_per_worker": self._worker_size,
            "migration_topology": self._topology.to_json(),
            "migration_prob": self._migration_prob,
            "pollination": self.pollination,
            "propagator": repr(self.propagator),
            "generations": self.generations,
            "num_workers": int(self._world.size),
            "version": __version__,
            **({} if self.objectives is None else {"objectives": self.objectives.describe()}),
        }

    def _open_writer(
        self,
        space: SearchSpace,
        generation_start: int,
        resume_table: np.ndarray | None = None,
        plan_table: np.ndarray | None = None,
    ) -> None:
        config = {"limits": space.to_json(), "fingerprint": space.fingerprint, **self._settings()}
        attrs = {
            "session": self._session,
            "writer": self._world.rank,
            "island": self.island_idx,
            "island_rank": self.island_rank,
            "generation_start": generation_start,
            "config": config,
        }
        self._writer = CheckpointWriter(
            self.checkpoint_path,
            self._session,
            self._world.rank,
            space,
            attrs,
            resume_table=resume_table,
            plan_table=plan_table,
        )

    def _record(self, kind: Record, ind: Individual, home: int | None = None) -> None:
        if self._writer is None:
            self._open_writer(ind.space, self._generation_start)
        assert self._writer is not None
        if kind is Record.STARTED:
            self._writer.started(ind, self.island_idx if home is None else home)
        else:
            self._writer.record(kind, ind, self.island_idx if home is None else home)

    def _snapshot(self, force: bool = False) -> None:
        """Hand the writer this worker's state; only the latest is written, so at most a few per flush."""
        now = time.monotonic()
        if self._writer is None or (not force and now - self._last_snapshot < _SNAPSHOT_INTERVAL):
            return
        self._last_snapshot = now
        propagator_state = self.propagator.state_dict() if isinstance(self.propagator, Propagator) else {}
        state = {
            "rng": self.rng.getstate(),
            "propagator": propagator_state,
            "owed_replacements": self._owed_replacements,
            "next_owner": self._next_owner,
        }
        self._writer.snapshot(self.generation, state)

    # ----------------------------------------------------------------------------------------- loop

    def _work(self, logging_interval: int, debug: int) -> None:
        self._progress.counting = debug >= 1 and self._progress.island_head
        began, started = time.monotonic(), self._started
        while self._requeue or self.generations == -1 or self.generation < self.generations:
            self._receive(debug)
            if self._should_stop():
                break
            self._await_peers()
            redo = bool(self._requeue)
            ind = self._next_individual()
            if ind is None:
                self._request_stop(self._exhausted_text())
                break
            if ind.uid < 0:
                ind.uid = self._mint_uid()
            ind.status = Status.PENDING
            self._record(Record.STARTED, ind)  # a note only: its row is written if a flush finds it running
            self._evaluate(ind, debug, redo)
            if ind.status is Status.INTERRUPTED:
                # Left pending in the checkpoint: evaluated again on resume.
                self._request_stop(
                    self._stop_reason or self._stop_conditions.reason or "an evaluation was interrupted"
                )
                break
            self._store([ind], self._select_replaced() if self._owed_replacements else [], Record.EVALUATED)
            if ind.status is Status.FAILED and self.on_failure == "stop":
                self._request_stop(
                    f"worker {self.island_rank} of island {self.island_idx} failed", abort=True
                )
            elif ind.status is Status.FAILED and self._misconfigured:
                # A helper of this library refused the setup (a LayoutError, say): every evaluation would.
                self._request_stop(
                    f"worker {self.island_rank} of island {self.island_idx} is misconfigured: "
                    f"{self._misconfigured}",
                    abort=True,
                )
            if self.migration.wants_to_emigrate() and self._stop_reason is None:
                self._emigrate(debug)
            if not redo:  # an interrupted evaluation done again does not count as a new generation
                self.generation += 1
            self._snapshot()
            if debug >= 1:
                if self._progress.first_rank and self._progress.due():
                    # Take in what the island's peers finished meanwhile: the line counts their results
                    # too, not only this worker's (once per interval, so a cheap loss does not pay).
                    self._receive(debug)
                self._progress.tick()
            if debug >= 2 and self.island_rank == 0 and self.generation % logging_interval == 0:
                self._log_progress()
        # Seconds per generation of this session: how often this worker passes news on while it drains.
        self._pace = (time.monotonic() - began) / max(1, self._started - started)
        self._finish()
        if self._stop_reason is not None and self.island_rank == 0:
            # Job-wide news: said once, by the first rank; each island's head says it at debug level.
            log.log(
                logging.WARNING if self._world.rank == 0 else logging.DEBUG,
                f"Island {self.island_idx}: stopped early ({self._stop_reason}); {self._status_text()}.",
            )
        elif debug >= 2 and self.island_rank == 0:
            log.info(f"Island {self.island_idx}: done; {self._status_text()}.")

    def _log_progress(self) -> None:
        planned = "" if self.generations == -1 else f"/{self.generations}"
        log.info(
            f"Island {self.island_idx}: worker 0 at generation {self.generation}{planned}; "
            f"{self._status_text()}."
        )

    def _status_text(self) -> str:
        elapsed = time.time() - self.start_time
        if self.objectives is not None:
            front = len(pareto_front(self.population))
            known = f"{self._population.n_known} individuals known, {front} on the Pareto front"
            return f"{known}, {elapsed:.1f} s elapsed"
        best = self._population.best(1)
        best_loss = f"{best[0].loss:.6g}" if best else "n/a"
        return f"{self._population.n_known} individuals known, best loss {best_loss}, {elapsed:.1f} s elapsed"

    def _await_peers(self) -> None:
        """Give island peers whose news is late a bounded time to deliver it, before breeding.

        A worker far ahead of a peer whose evaluation should have ended (see :meth:`Breeder.behind`)
        takes in messages, yielding the processor between polls, until that peer's news arrives or
        :data:`propulate.breeding.MAX_WAIT` seconds pass: with more ranks than cores the peer may simply not
        have been scheduled, and with a cheap loss function a few milliseconds decide whether the worker
        breeds from its island's results or from its own. A peer that is busy with an evaluation not yet
        due is not waited for, so costly evaluations do not pay for this. Waits cannot go round in a
        circle: a worker only waits for peers that started fewer evaluations than it did, so the one
        furthest behind never waits, and its news ends the others' waits.

        The worker does not send its own fresh result before it waits (it goes with its next announcement).
        Sending it first was tried: peers that breed meanwhile would see it (the replicated Nelder-Mead of
        ``tests/mpi/programs/nm_run.py``, 4 ranks on 2 cores, made 121 to 134 steps from 400 evaluations
        instead of 90 to 111), but the extra message per waiting generation delayed announcements to
        descheduled peers, and 8 workers on a small discrete space repeated a configuration in 3 of 9
        launches of 240 evaluations (none in 11 without it): a repeated evaluation is a certain waste,
        a stale breeding a possible one.
        """
        breeder = self._breeder
        if not breeder.behind(self._started, time.monotonic()):
            return
        deadline = time.monotonic() + MAX_WAIT
        backoff = Backoff()
        while self._stop_reason is None:
            self._check_alarm()
            if self._receive():
                backoff.reset()
            now = time.monotonic()
            if now >= deadline or not breeder.behind(self._started, now):
                return
            backoff.wait()

    def _next_individual(self) -> Individual | None:
        """Return the next individual to evaluate, announced to the island; none if the space is exhausted.

        An evaluation interrupted by the end of the last job is done again first; otherwise a new individual
        is bred. The announcement goes with what this worker learned since it last told its island; a
        peer that announced, or evaluated, the same configuration meanwhile makes the worker breed again
        (see :meth:`_claim`).
        """
        self._started += 1
        if self._requeue:
            redo = self._requeue.pop(0)
            self._tell_island(announce=redo)
            return redo
        while True:
            ind = self._breed()
            if ind is None:
                return None
            self._tell_island(announce=ind)
            if self._claim(ind):
                return ind

    def _claim(self, ind: Individual) -> bool:
        """Whether ``ind``, just announced, is this worker's to evaluate: no peer announced it meanwhile.

        One look at what arrived where a collision is unlikely; where it is likely (a finite space, a
        replicated propagator, or one that bred a known configuration before), a wait until the peers that
        may be breeding matched the announcement, and the lower rank keeps a configuration two workers
        announced at once. The protocol, why it is exact and what it costs: :mod:`propulate.breeding`.
        """
        key = ind.space.key(ind.position)
        breeder = self._breeder
        if self._relay.relays or not (
            self._collisions_likely or ind.space.size is not None or breeder.repeats
        ):
            self._receive()
            if not breeder.is_known(key):
                return True
            self._collisions_likely = True  # the propagator repeats: confirm from now on
            return False
        me = self._mail.comm.rank
        now = time.monotonic()
        mark = self._mail.mark(breeder.may_be_breeding(now))
        deadline = now + MAX_WAIT
        backoff = Backoff()
        while True:
            late = time.monotonic() >= deadline
            confirmed = late or self._mail.matched(mark)
            if self._receive():
                backoff.reset()
            if breeder.population.knows(key):
                return False
            claimants = breeder.claimants(key)
            if any(peer < me for peer in claimants):
                return False
            if (confirmed and not claimants) or late or self._stop_reason is not None:
                return not claimants
            self._check_alarm()
            backoff.wait()

    def _breed(self) -> Individual | None:
        """Breed this worker's next individual (none: every configuration of a finite space is known)."""
        ind = self._breeder.breed()
        if ind is None:
            return None
        ind.generation = self.generation
        ind.rank = self.island_rank
        ind.island = self.island_idx
        ind.current = self.island_rank
        ind.migration_steps = 0
        ind.migration_history = str(self.island_idx)
        ind.loss = math.inf
        ind.status = Status.PENDING
        ind.active = True
        return ind

    def _evaluate(self, ind: Individual, debug: int, redo: bool) -> None:
        resume = self._folders.prepare(ind, redo)
        if self._worker.size > 1:
            self._channel.send_task(ind, resume)
        with self._relaying.meanwhile():
            outcome = self.evaluator(ind, resume)
        ind.loss = outcome.loss
        ind.losses = outcome.losses
        ind.status = outcome.status
        ind.metrics = outcome.metrics
        ind.evalperiod = outcome.period
        ind.evaltime = time.time()
        ind.steps = outcome.steps
        ind.surrogate_data = self.evaluator.learn(outcome)
        self._folders.finish(
            ind,
            completed=outcome.status is Status.COMPLETED,
            interrupted=outcome.status is Status.INTERRUPTED,
            island=itertools.chain(self._population, [ind]),
        )
        ind.error = outcome.error.strip()[-ERROR_CHARS:] if outcome.status is Status.FAILED else None
        # The error's last line (type and message) when a helper of this library refused the setup.
        self._misconfigured = outcome.error.strip().splitlines()[-1] if outcome.misconfigured else ""
        if outcome.status is Status.COMPLETED:
            self._mean_period += (outcome.period - self._mean_period) / min(self.generation + 1, 20)
        elif outcome.status is Status.FAILED:
            detail = outcome.error or "a rank of this worker failed; see its own log line"
            # The error itself, the traceback's last line: its traceback is logged the first time only.
            error = detail.strip().splitlines()[-1] if detail.strip() else detail
            if error in self._errors_seen:
                detail = f"{error} (as before; traceback not repeated)"
            self._errors_seen.add(error)
            log.error(
                f"Island {self.island_idx}, worker {self.island_rank} (rank {MPI.COMM_WORLD.rank} on "
                f"{socket.gethostname()}), generation {ind.generation}: the evaluation of {ind.params()} "
                f"failed:\n{detail}"
            )
        if debug >= 2:
            log.info(
                f"Island {self.island_idx}, worker {self.island_rank}, generation {self.generation}: {ind}"
            )

    def _observe(self, individuals: Iterable[Individual]) -> None:
        """Show the propagator individuals that entered the population (if it learns from them)."""
        if self._observer is not None:
            for ind in individuals:
                self._observer(ind)

    def _learn_from(self, individuals: Iterable[Individual]) -> None:
        """Let this worker's surrogate take in what other workers' surrogates learned from ``individuals``."""
        if self.surrogate_factory is None:
            return  # no surrogate here: nothing to merge into, and nothing to walk through
        for ind in individuals:
            if ind.surrogate_data is not None:
                self.evaluator.consult_surrogate("merge", ind.surrogate_data)

    def _mint_uid(self) -> int:
        self._introduced += 1
        return make_uid(self._session, self._world.rank, self._introduced - 1)

    def _exhausted_text(self) -> str:
        size = self._breeder.space.size if self._breeder.space is not None else "its"
        return f"the search space is exhausted: all {size} configurations are evaluated or being evaluated"

    def _retention(self) -> int | None:
        """How many individuals stay in memory when the rest is released; None where all must stay.

        See *Memory* in the class docstring: releasing is exact only where nothing deactivates an
        individual and nothing reads more than the best few.
        """
        pool = self._breeder.pool
        if (
            pool is None
            or self.objectives is not None
            or self.surrogate_factory is not None
            or not isinstance(self.migration, IsolatedIslands)
        ):
            return None
        return 2 * max(pool, KEPT, self._folders.keep_best)

    def _release(self) -> None:
        """Release the individuals breeding no longer needs once the worker holds its memory limit."""
        retained = self._retained
        if retained is not None and len(self._population) >= max(self._memory_limit, 2 * retained):
            self._population.release(retained)

    def _store(self, added: list[Individual], deactivated: list[int], kind: Record) -> None:
        """Store new individuals and deactivations and checkpoint them; the island hears of them next."""
        for ind in added:
            self._population.add(ind)
            self._record(kind, ind)
        self._release()
        self._observe(added)
        if kind is Record.ARRIVED:
            self._learn_from(added)
        elif kind is Record.EVALUATED:
            self._progress.count(added)
        for uid in deactivated:
            self._population.deactivate(uid)
            if self._writer is not None:
                self._writer.deactivated(uid, self.island_idx)
        self._news.queue(added, deactivated)

    def _tell_island(
        self, announce: Individual | None = None, retire: bool = False, hold: bool = False
    ) -> None:
        """Send the island's other workers what this worker stored since it last told them.

        With ``announce``, also the individual this worker starts evaluating, so that no peer breeds the
        same configuration meanwhile (see :mod:`propulate.breeding`); its evaluated individual reaches the
        peers with the next announcement, so one message per generation carries both. With ``retire``,
        that this worker breeds no more (see :mod:`propulate.mpi.news`). With ``hold``, news that reaches
        only workers that breed no more waits (see :meth:`Relay.flush`).
        """
        if retire:
            self._relay.retire(self._mail.comm.rank)
        update = self._news.update(announce, self._started, self._mean_period, retire)
        if update is not None:
            self._relay.originate(Tag.ISLAND_UPDATE, update)
        self._relay.flush(self._mail, hold)  # with what arrived to be passed on since the last flush

    def _receive(self, debug: int = -1) -> bool:
        """Take in and apply every message that has arrived; whether there were any.

        Island news to pass on along the relay tree (:mod:`propulate.mpi.dissemination`) leaves with this
        worker's next update, once per generation, or while it evaluates (:class:`Relaying`):
        one message per finger and generation, however often a worker polls (at 128 workers, flushing at
        every poll sent 33 messages per evaluation, twice the fingers).
        """
        relayed = self._relaying.taken()  # taken in and passed on by the watchdog thread meanwhile
        if relayed:
            self._take_news(relayed)
        messages = self._mail.receive_any()
        for _, tag, obj in messages:
            if tag == Tag.ISLAND_UPDATE:
                self._take_news(self._relay.take(obj))
            elif tag == Tag.EMIGRANTS:
                origin, travellers = obj
                self._take_immigrants(origin, travellers, debug)
            else:
                self._progress.take(obj)
        return bool(messages)

    def _take_news(self, news: list[tuple[int, int, Any]]) -> None:
        """Apply island news, ``(sender, tag, object)`` from :meth:`Relay.take`, in the order received."""
        for origin, kind, obj in news:
            if kind == Tag.ISLAND_UPDATE:
                self._take_update(origin, obj)
            else:
                self.evaluator.consult_surrogate("merge", obj)

    def _share_interim(self, data: Any) -> None:
        """Send the island's peers what the surrogate learned from the run under way (a rung result)."""
        self._relay.originate(Tag.SURROGATE, data)
        self._relay.flush(self._mail)

    # The surrogate's hooks, called by the evaluator while the watchdog thread may use the mailbox.
    def _receive_while_evaluating(self) -> bool:
        with self._relaying.lock:
            received = self._receive()
            self._relay.flush(self._mail)
            return received

    def _share_while_evaluating(self, data: Any) -> None:
        with self._relaying.lock:
            self._share_interim(data)

    def _poll_in_background(self) -> None:
        """Poll from the watchdog thread: alarm messages, and island news to pass on while evaluating."""
        assert self._alarm is not None
        self._alarm.poll()
        self._relaying.poll()

    def _receive_and_forward(self) -> bool:
        """At the end of the run: take in what arrived; pass it, and immigrants, on to the island.

        What arrives meanwhile is passed on together, about as often as this worker did while it evaluated
        (:func:`~propulate.mpi.dissemination.linger`), to the workers that lead to one that still breeds;
        the rest before it enters the drain's barrier and after it.
        """
        self._check_alarm()
        received = self._receive()
        if time.monotonic() - self._relay.flushed >= linger(self._pace):
            self._tell_island(hold=True)
        return received

    def _take_update(self, source: int, update: tuple[Any, ...]) -> None:
        runs, deactivated, said = self._news.read(source, update)
        population = self._population
        for added in runs:
            population.extend(added)
            self._observe(added)
            self._learn_from(added)
            self._progress.count(added)
        for uid in deactivated:
            population.deactivate(uid)
        self._release()
        if said is not None:
            if said.key is None:
                self._breeder.retire(source)
                self._relay.retire(source)
            else:
                self._breeder.announce(
                    source, said.key, said.started, said.period, time.monotonic(), said.configuration
                )

    # ------------------------------------------------------------------------------------- migration

    def _emigrate(self, debug: int) -> None:
        policy = self.migration
        assert isinstance(policy, MigrationPolicy)
        departed: list[int] = []
        for target, count in policy.targets():
            # A migrant leaves only from the worker responsible for it; a pollinator may be sent by any.
            owner = None if policy.pollination else self.island_rank
            emigrants = policy.choose_emigrants(self._population, count, owner)
            if not emigrants:
                continue
            travellers = []
            for emigrant in emigrants:
                traveller = emigrant.copy()
                traveller.uid = self._mint_uid()
                traveller.active = True
                traveller.migration_steps += 1
                traveller.migration_history += f"-{target}"
                travellers.append(traveller)
                self._record(Record.DEPARTED, traveller, home=target)
                if not policy.pollination:
                    self._population.deactivate(emigrant.uid)
                    departed.append(emigrant.uid)
            self._mail.send((self.island_idx, travellers), [int(self.island_displs[target])], Tag.EMIGRANTS)
            if debug >= 3:
                kind = "pollinators" if policy.pollination else "emigrants"
                log.info(
                    f"Island {self.island_idx}, worker {self.island_rank}: sent {len(travellers)} {kind} "
                    f"to island {target}."
                )
        if departed:
            self._store([], departed, Record.DEACTIVATED)

    def _take_immigrants(self, origin: int, travellers: list[Individual], debug: int) -> None:
        replaced: list[int] = []
        if self.pollination:
            self._owed_replacements += len(travellers)
            replaced = self._select_replaced()
        for traveller in travellers:
            traveller.current = self._next_owner
            self._next_owner = (self._next_owner + 1) % self._island.size
        self._store(travellers, replaced, Record.ARRIVED)
        if debug >= 3:
            log.info(
                f"Island {self.island_idx}: {len(travellers)} immigrant(s) from island {origin}, "
                f"{len(replaced)} individual(s) replaced."
            )

    def _select_replaced(self) -> list[int]:
        """Pollination: choose whom owed immigrants replace.

        An island with too few active individuals pays the rest of its debt as soon as it has them.
        """
        assert isinstance(self.migration, MigrationPolicy)
        victims = self.migration.choose_replaced(self._population, self._owed_replacements)
        self._owed_replacements -= len(victims)
        return [victim.uid for victim in victims]

    def _finish(self) -> None:
        """End of the run: release sub-ranks, receive every message still in flight, close the checkpoint.

        First the island's other workers hear this worker's last news and that it breeds no more (nobody waits
        for its results then). The mailbox is drained twice: immigrants taken in during the first drain are
        passed on to the island's other workers, and the second drain waits for those updates (no message
        received in it sends anything). Every worker drains twice, with or without migration, so that the
        collective calls match whatever each worker was told about the topology. Between the two, each
        island's head sends the first rank its final progress counts: after the first drain it has taken in
        every evaluation of its island, and the second delivers the report. No collective is needed for them,
        so no worker waits in one, spinning, while another finishes (8 ranks on 2 cores: 5 - 12 ms for a
        gather).
        """
        if self._worker.size > 1:
            self._channel.send_stop()
        self._tell_island(retire=True)
        drain(self._mail, self._receive_and_forward, self._tell_island)
        if self._progress.counting:
            self._progress.report()
        drain(self._mail, self._receive_and_forward, self._tell_island)
        if self._writer is not None:
            self._snapshot(force=True)
            self._writer.close()
        if self._owed_replacements:
            log.warning(
                f"Island {self.island_idx}: {self._owed_replacements} pollinator(s) found no active "
                "individual "
                "to replace and were added without replacement."
            )


def progress_interval() -> float:
    """Seconds between progress lines: ``PROPULATE_PROGRESS_INTERVAL``, else 10.

    Raises
    ------
    ValueError
        If the variable holds no positive number.
    """
    interval = seconds_from_environment("PROPULATE_PROGRESS_INTERVAL", 10.0)
    if interval is None or not interval > 0:
        raise ValueError(
            f"PROPULATE_PROGRESS_INTERVAL: expected a positive number of seconds, got {interval}"
        )
    return interval


def _nothing() -> None:
    return None


def _release_torch_group() -> None:
    """Abort the worker's torch process group if the helper created one (from any thread).

    Its operations in flight fail at once, here and on the partners waiting for this rank; the next
    evaluation creates a new group.
    """
    distributed = sys.modules.get("propulate.utils.distributed")
    if distributed is not None:
        distributed.abort_worker_process_group()
