"""The asynchronous loop of one worker: breed, evaluate, share, migrate — never wait for anybody.

Every worker of an island runs the same loop. It takes in whatever its island's other workers sent, breeds
one individual from the island's population with the propagator — one whose parameter values the island
does not know yet (see :mod:`propulate.breeding`) — and sends the island's other workers its news: the
result of its last evaluation and the individual it evaluates now. It evaluates it (on all ranks of a
multi-rank worker), stores it, and, with the migration probability, sends emigrants to other islands.
Generations are a per-worker counter; there is no global barrier until the end of the run, where every
message still in flight is received before ``propulate()`` returns. The one wait before breeding is
bounded: a worker far ahead of a peer whose result is overdue gives it a few milliseconds to arrive. A
worker with nothing to breed, as peers evaluate a finite search space's last configurations, waits for news;
once every configuration is evaluated the run stops.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpi4py import MPI

from .breeding import Breeder, find_space
from .checkpoint import CheckpointError
from .checkpoint.worker import PlanPart, WorkerState
from .errors import RunAbortedError, RunFailedError
from .evaluation import FailureLog, make_surrogate
from .individual import Individual, Status
from .island_state import retention
from .lifecycle import stop_settings
from .migration import IsolatedIslands, MigrationPolicy, warn_owed_replacements
from .mpi.alarm import agree
from .mpi.layout import Layout, layout_of
from .mpi.link import Arrival, Immigrants, PeerUpdate, SurrogateNews
from .mpi.messaging import bcast
from .objectives import Objectives
from .progress import progress_interval
from .propagators.base import Propagator, SelectMax, SelectMin
from .run_results import KEPT, RunResults, RunResultsMixin
from .space import SearchSpace
from .surrogate import NullSurrogate
from .trackers.base import EvaluationRecord, check_trackers
from .trackers.runner import Tracking
from .validation import check_choice, check_int, check_probability
from .wiring import Settings, compose, start_tracking

__all__ = ["Propulator"]

log = logging.getLogger("propulate")


class Propulator(RunResultsMixin):
    """The asynchronous evolutionary optimizer of one island's worker.

    Used directly it optimizes one island without migration; :class:`propulate.Islands` builds one per
    worker with the communicators of an island model (its :class:`~propulate.mpi.layout.Layout`).

    Parameters
    ----------
    loss_fn : callable
        The function minimized: ``loss_fn(params) -> float`` (or ``loss_fn(params, comm)`` with multi-rank
        workers). It may also return a mapping with a ``"loss"`` entry and further metrics, or yield interim
        losses as a generator (:mod:`propulate.evaluation`). With several ``objectives``, one value each.
    propagator : Propagator
        Breeds a new individual from the island's population.
    rng : random.Random or int
        This worker's generator (seed it differently on every rank); or an int, a seed the same on every
        rank, from which each rank derives its own (:func:`propulate.utils.rank_rng`, stream 1, so that the
        same seed passed to :func:`~propulate.utils.get_default_propagator` gives it another stream).
    island_idx, island_comm, propulate_comm, worker_sub_comm : int, MPI.Comm
        This worker's island; the roots of the island's workers and of all workers (``MPI.COMM_NULL`` on the
        other ranks of multi-rank workers); the ranks of this worker (``MPI.COMM_SELF`` for one rank).
        Ignored when ``layout`` is given.
    generations : int >= -1
        Evaluations per worker; ``-1`` runs until stopped, ``0`` does nothing.
    checkpoint_path : str or pathlib.Path
        Directory for checkpoints; created if missing (:doc:`/checkpointing`).
    migration_topology : {"hypercube", "complete", "ring"}, array_like of int, Topology, or None
        How many individuals island ``i`` sends to island ``j`` per migration event (see
        :class:`propulate.Islands`). Default (``None``): ``"hypercube"``; 1.2.2's was ``"complete"``.
    migration_prob : float in [0, 1]
        Probability that this worker starts a migration event after one of its generations.
    emigration_propagator, immigration_propagator : Propagator class
        Select emigrants (default the best, :class:`SelectMin`) and, for pollination, the individuals that
        immigrants replace (default the worst); with several ``objectives`` in NSGA-II's order.
    island_displs, island_counts : array_like of int, optional
        For each island, the ``propulate_comm`` rank of its first worker and its number of workers.
        Default: gathered from all workers.
    surrogate_factory : callable, optional
        Returns this worker's :class:`propulate.surrogate.Surrogate`, which may stop evaluations of a
        generator loss function early; it learns from every evaluation of its island and from immigrants,
        and is rebuilt from the checkpoint on resume. Default: no early stopping.
    pollination : bool
        Send copies (pollination) instead of moving individuals (migration).
    resume : bool, optional
        Continue from the checkpoint in ``checkpoint_path`` if there is one, or start fresh (earlier files
        are moved into a ``previous-<time>`` folder). Default: ``PROPULATE_RESUME`` (``0`` starts fresh),
        else resume.
    on_failure : {"continue", "stop"}
        What a failed evaluation does: the run goes on, or every rank stops and raises
        :class:`propulate.errors.RunAbortedError` (see *Failures* in :mod:`propulate.evaluation`).
    accept_inf : bool
        Count an infinite loss as a result instead of a failure.
    time_limit : float, optional
        Wall-clock budget of each ``propulate()`` call, seconds (default ``PROPULATE_TIME_LIMIT``, else
        none; SLURM's job end is one too): it returns before it runs out (:mod:`propulate.lifecycle`).
    grace_period : float, optional
        Seconds a running evaluation may go on after a stop signal before it is interrupted (and evaluated
        again on resume); default ``PROPULATE_GRACE_PERIOD``, else 20 (:mod:`propulate.lifecycle`).
    failure_timeout : float
        With multi-rank workers: seconds a rank whose loss function failed waits for the worker's other
        ranks before it aborts the job (:mod:`propulate.mpi.worker_comm`).
    objectives : None, int, sequence of str, or mapping of str to {"minimize", "maximize"}
        Several objectives (:mod:`propulate.objectives`): their number, their names, or names with
        directions; :meth:`pareto_front` returns the run's front. Default: one loss, a number.
    keep_best_folders : int in [0, 100]
        Evaluation folders (:func:`propulate.evaluation_checkpoint`) kept after the evaluation: those of
        the island's and, at the end, the run's best (:mod:`propulate.checkpoint.evaluations`).
    layout : Layout, optional
        This rank's communicators and islands (:func:`propulate.mpi.layout.build_layout`), instead of the
        ones given one by one.
    trackers : Tracker or sequence of Tracker, optional
        Experiment trackers (:mod:`propulate.trackers`, e.g. TensorBoard, MLflow) that the worker's first
        rank hands each of the worker's evaluations, in background threads; a failing tracker logs a
        warning and never stops the run (:doc:`/trackers`).

    Raises
    ------
    ValueError
        For out-of-range arguments (named in the message).
    TypeError
        If ``loss_fn`` or ``propagator`` is not callable, ``loss_fn`` cannot take the worker communicator, or
        ``trackers`` holds something that is no :class:`propulate.trackers.Tracker`.
    propulate.checkpoint.CheckpointError
        On every rank, if the checkpoint in ``checkpoint_path`` cannot be used (a file cannot be read, or it
        was made for another search space).

    Notes
    -----
    Construction is collective over all ranks of all workers: it takes in the checkpoint (unless ``resume``
    is off), so that :attr:`population` and ``generation`` hold what it holds, as in Propulate 1.2.2, and
    :meth:`summarize` works without a run; nothing is written before :meth:`propulate`. What raises on one
    rank meanwhile, and outside the loss function during a run, is raised on every rank: that rank's
    exception there, :class:`propulate.errors.WorkerFailedError` naming it elsewhere. A worker holds what
    breeding needs, not the run's history, where that is exact (*Memory* in :mod:`propulate.island_state`).
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
        layout: Layout | None = None,
        trackers: Any = None,
    ) -> None:
        self.generations = check_int("generations", generations, -1)
        chosen_trackers = check_trackers(trackers)
        self.objectives = Objectives.of(objectives)
        check_int("keep_best_folders", keep_best_folders, 0, maximum=KEPT)
        if not callable(propagator):
            raise TypeError(f"propagator: expected a Propagator, got {type(propagator).__name__}")
        check_probability("migration_prob", migration_prob)
        check_choice("on_failure", on_failure, ("continue", "stop"))
        self.grace_period, self.time_limit = stop_settings(grace_period, time_limit, failure_timeout)
        self.on_failure = on_failure
        progress_interval()  # checked on every rank: an error must not hang
        self.loss_fn, self.propagator, self.surrogate_factory = loss_fn, propagator, surrogate_factory
        if isinstance(rng, int):  # a seed (rank_rng refuses a bool, naming the seed)
            from .utils import rank_rng

            rng = rank_rng(rng, stream=1)
        self.rng = rng if rng is not None else random.Random()
        # The one place where 1.2.2's communicators become a layout.
        layout = self.layout = layout or layout_of(
            island_idx, island_comm, propulate_comm, worker_sub_comm, island_displs, island_counts
        )
        self.island_idx, self.worker_sub_comm = layout.island_index, layout.worker_comm
        self.island_comm, self.propulate_comm = layout.island_comm, layout.propulate_comm
        self.island_displs, self.island_counts = layout.island_displs, layout.island_counts
        failure: Exception | None = None  # raised on every rank once all took part (see _load_checkpoint)
        try:
            self.surrogate = make_surrogate(surrogate_factory)
        except Exception as err:
            failure, self.surrogate = err, NullSurrogate()
        self.checkpoint_path = Path(checkpoint_path)
        self.checkpoint_path.mkdir(parents=True, exist_ok=True)
        migration = (migration_topology, migration_prob, emigration_propagator, immigration_propagator)
        settings = Settings(
            self.generations, self.checkpoint_path, *migration, bool(pollination), self.objectives, resume,
            keep_best_folders, accept_inf, failure_timeout, self.grace_period, self.time_limit,
        )  # fmt: skip
        surrogate = None if surrogate_factory is None else self.surrogate
        parts = compose(layout, loss_fn, propagator, self.rng, surrogate, settings, self._take)
        self._worker, self._stops, self._folders = parts.worker, parts.stops, parts.folders
        self.state, self.evaluator, self._channel = parts.state, parts.evaluator, parts.channel
        self.is_worker_root = parts.root is not None
        self.generation, self.start_time, self.island_rank = 0, math.nan, -1
        self.migration: IsolatedIslands | MigrationPolicy = IsolatedIslands()
        self.pollination = bool(pollination)
        if parts.root is not None:  # the link, progress counter and checkpoint session exist there only
            root = parts.root
            self._island, self._world, self._link = root.island, root.world, root.link
            self._progress = root.progress
            self._session, self.migration, self.island_rank = root.session, root.migration, root.island.rank
            self.pollination = root.migration.pollination
        self._breeder = Breeder(propagator, self.state.population, self.rng)  # rebuilt when a session begins
        self._in_run = False  # inside propulate(): the island's checkpoint files are being written
        self._results: RunResults | None = None  # the run's best, on every rank after propulate()
        self._requeue: list[Individual] = []  # interrupted evaluations of the last job, done first
        self._refusal = ""  # the error of the last evaluation if a helper refused the setup (see Evaluation)
        self._mean_period = 0.0  # running mean of this worker's evaluation time, seconds
        self._started = 0  # evaluations this worker started in this session
        self._collisions_likely = False  # whether announcements are confirmed in any space (see _claim)
        self._space: SearchSpace | None = None  # the search space, once known
        # Trackers run on the worker's root only, each session in threads of their own (see _begin_session).
        self._tracking = Tracking(chosen_trackers if self.is_worker_root else ())
        self._load_checkpoint(failure)

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
            says (the checkpoint is written first): a run without a single result is no success.
        WorkerFailedError
            On every rank but the failing one, when a rank failed outside the loss function (which raises
            its own exception).
        """
        check_int("logging_interval", logging_interval, 1)
        self.start_time = time.time()
        stops = self._stops
        roots = self._world if self.is_worker_root else None
        self._in_run = True
        try:
            polls, count = self._poll_in_background, lambda: self.evaluator.count
            abandon = self._session.abandon if self.is_worker_root else lambda: None
            with stops.run(self._worker, roots, polls, count, abandon):
                self._run(logging_interval, debug)
        finally:
            self._in_run = False
        if stops.abort:
            raise RunAbortedError(f"the run stopped on a failed evaluation: {stops.reason}")
        if self._results is not None and self._results.all_failed:
            raise RunFailedError(
                f"every evaluation of the run failed ({self._results.counts_text()}); the tracebacks are in "
                f"the log and the failed individuals in the checkpoint in {self.checkpoint_path}"
            )

    def _run(self, logging_interval: int, debug: int) -> None:
        """Begin the session, loop (or serve the worker's root), and share the outcome with the worker."""
        check = self._stops.check
        error = self._begin_session() if self.is_worker_root else None
        if self._worker.size > 1:
            error = bcast(self._worker, error, check)
        if error is not None:
            raise CheckpointError(error)
        if self.is_worker_root:
            self._work(logging_interval, debug)
            self._stops.settle()
            self._results = self._gather_results(self._world, self._stops.check, self.island_rank == 0)
            if self._folders.keep_best:
                self._folders.settle(self._kept_best(self._folders.keep_best))
            if debug >= 1 and self._world.rank == 0:
                log.info(f"Done: {self._progress.line()}; {self._results.counts_text()}.")
        else:  # the worker's other ranks evaluate what its root hands over until it says stop
            while (task := self._channel.next_task(check)) is not None:
                self.evaluator.run_only(*task)
        outcome = (self._stops.reason, self._stops.abort, self._results)
        if self._worker.size > 1:
            outcome = self._share_with_sub_ranks(outcome, lambda obj: bcast(self._worker, obj, check))
        self._stops.reason, self._stops.abort, self._results = outcome

    def _share_with_sub_ranks(self, extra: Any, broadcast: Callable[[Any], Any]) -> Any:
        """Give the worker's other ranks (for user code) its population, generation and ``extra``; return it.

        Collective over the worker with ``broadcast`` from its root.
        """
        population, self.generation, extra = broadcast(
            (self.state.population, self.generation, extra) if self.is_worker_root else None
        )
        if not self.is_worker_root:
            self.state.population = population
        return extra

    def _poll_in_background(self) -> None:
        """Poll from the watchdog thread: alarm messages, and island news to pass on while evaluating."""
        self._stops.alarm.poll()
        if self.is_worker_root:
            self._link.relaying.poll()

    def _load_checkpoint(self, failure: Exception | None) -> None:
        """Take in the checkpoint, so that the population is there from construction on, as in 1.2.2.

        Collective over all ranks of all workers. What the propagator's or surrogate's hooks raise on one
        rank meanwhile, or the surrogate factory's ``failure``, is raised on every rank
        (:func:`~propulate.mpi.alarm.agree`); so is a :class:`~propulate.checkpoint.CheckpointError`.
        """
        error = None
        if self.is_worker_root:
            error, part = self._session.plan(find_space(self.propagator))
            if part is not None and failure is None:
                try:
                    self._take_plan(part)
                except Exception as err:
                    failure = err
        agree(failure, self._worker, self._world if self.is_worker_root else None, "building the Propulator")
        if self._worker.size > 1:
            error = self._share_with_sub_ranks(error, lambda obj: self._worker.bcast(obj, root=0))
        if error is not None:
            raise CheckpointError(error)

    def _take_plan(self, part: PlanPart) -> None:
        """Start from this worker's part of the plan; runs the propagator's and the surrogate's hooks.

        What stays in memory is decided here, once per session (*Memory* in :mod:`propulate.island_state`).
        """
        if isinstance(self.propagator, Propagator):
            self.propagator.bind(self.island_rank, self._island.size)
        self._space, self.generation, self._requeue = part.space, part.counter, part.requeue
        for ind in self._requeue:
            ind.current = self.island_rank
        isolated = isinstance(self.migration, IsolatedIslands)
        exact = isolated and self.objectives is None and self.surrogate_factory is None
        retained = retention(self._breeder.pool, exact, self._folders.keep_best, KEPT)
        self.state.restore(part.population, retained)
        if self.island_rank == 0:  # takes in the island's immigrants: also those a resume delivered
            self._folders.arrived(self.state.population, self.state.population)
        if part.state is not None:
            self.rng.setstate(part.state.rng)
            if isinstance(self.propagator, Propagator):
                self.propagator.load_state_dict(part.state.propagator)
            self.migration.owed_replacements = part.state.owed_replacements
            self.migration.next_owner = part.state.next_owner

    def _begin_session(self) -> str | None:
        """Begin a session (planning one unless construction did); collective over the roots; the error."""
        if not self._session.planned:
            error, part = self._session.plan(find_space(self.propagator))
            if part is None:
                return error
            self._take_plan(part)
        error = self._session.begin(self._space, self.island_rank)
        if error is None:
            name = f"Island {self.island_idx}, worker {self.island_rank}"
            self._failures = FailureLog(name)
            loud = self.island_rank == 0
            self._breeder = Breeder(self.propagator, self.state.population, self.rng, name, loud, self._space)
            self._breeder.expect(self._link.peers, time.monotonic())
            self._started = 0
            # Whether workers of the island may well breed the same configuration at once (see _claim).
            self._collisions_likely = isinstance(self.propagator, Propagator) and self.propagator.replicated
            self._progress.begin(self.state.population)
            at = (self._world, self.layout, self.checkpoint_path, self.objectives, self._session.session)
            start_tracking(self._tracking, *at, self.island_rank)
        return error

    def _snapshot(self, force: bool = False) -> None:
        """Hand the checkpoint this worker's state; only the latest is written, so at most a few per flush."""
        if self._session.snapshot_due(force):
            propagator = self.propagator.state_dict() if isinstance(self.propagator, Propagator) else {}
            owed, owner = self.migration.owed_replacements, self.migration.next_owner
            self._session.snapshot(self.generation, WorkerState(self.rng.getstate(), propagator, owed, owner))

    # ----------------------------------------------------------------------------------------- loop

    def _work(self, logging_interval: int, debug: int) -> None:
        """Run the loop of the module docstring, on a worker's root."""
        link, stops = self._link, self._stops
        self._progress.counting = debug >= 1 and self._progress.island_head
        began, started = time.monotonic(), self._started
        while self._requeue or self.generations == -1 or self.generation < self.generations:
            self._take(link.receive(), debug)
            if stops.should_stop(0.0 if self._folders.resumable else self._mean_period):
                break
            for arrivals in link.pace(lambda now: self._breeder.behind(self._started, now)):
                self._take(arrivals, debug)
            redo = bool(self._requeue)  # an interrupted evaluation done again is no new generation
            ind = self._next_individual()
            if ind is None and not self._breeder.exhausted():  # peers evaluate the last configurations
                self._take(link.idle(), debug)
                continue
            if ind is None:
                stops.request(self._breeder.exhausted_text())
                break
            interim = self._evaluate(ind, debug, redo)
            if ind.status is Status.INTERRUPTED:  # left pending in the checkpoint: evaluated again on resume
                stops.request(stops.reason or stops.conditions.reason or "an evaluation was interrupted")
                break
            self._store(ind, interim)
            if self.migration.wants_to_emigrate() and stops.reason is None:
                self._emigrate(debug)
            self.generation += not redo
            self._snapshot()
            self._tick(logging_interval, debug)
        # Seconds per generation of this session: how often this worker passes news on while it drains.
        link.pace_seconds = (time.monotonic() - began) / max(1, self._started - started)
        self._finish(debug)

    def _take(self, arrivals: list[Arrival], debug: int = -1) -> None:
        """Apply what arrived, in the order it arrived (see :meth:`IslandLink.receive`)."""
        for arrival in arrivals:
            if isinstance(arrival, PeerUpdate):
                self.state.told(arrival.runs, arrival.deactivated)
                self._breeder.hear(arrival.source, arrival.said, time.monotonic())
            elif isinstance(arrival, Immigrants):  # states that travel with them are taken over first
                travellers, population = arrival.travellers, self.state.population
                self._folders.arrived(travellers, itertools.chain(population, travellers))
                replaced = self.migration.immigrate(travellers, population, arrival.origin, debug >= 3)
                self.state.arrived(travellers, replaced)
                self._link.queue(travellers, replaced)
            elif isinstance(arrival, SurrogateNews):
                self.state.merge(arrival.data)
            else:
                self._progress.take(arrival.report)

    def _next_individual(self) -> Individual | None:
        """Return the next individual to evaluate, announced to the island; none if there is nothing to breed.

        An evaluation interrupted by the end of the last job is done again first; else a new one is bred
        (again, while a peer announced or evaluated the same configuration, see :meth:`_claim`).
        """
        while True:
            ind = (
                self._requeue.pop(0)
                if self._requeue
                else self._breeder.breed_for(self.generation, self.island_rank, self.island_idx)
            )
            if ind is None:  # the island is told that this worker evaluates nothing now
                self._link.tell(started=self._started, period=self._mean_period, withdraw=True)
                return None
            self._link.tell(ind, self._started + 1, self._mean_period)  # its started-th, this one included
            if ind.uid >= 0 or self._claim(ind):  # an evaluation done again is this worker's
                self._started += 1
                return ind

    def _claim(self, ind: Individual) -> bool:
        """Whether ``ind``, just announced, is this worker's to evaluate: no peer announced it meanwhile.

        The protocol, why it is exact and what it costs: :mod:`propulate.breeding`.
        """
        likely = self._collisions_likely or ind.space.size is not None or bool(self._breeder.repeats)
        claim = self._link.claim(ind.space.key(ind.position), self._breeder, likely)
        for arrivals in claim:
            self._take(arrivals)
        self._collisions_likely |= claim.repeated  # the propagator repeats: confirm from now on
        return claim.granted

    def _evaluate(self, ind: Individual, debug: int, redo: bool) -> list[tuple[float, dict[str, float]]]:
        """Evaluate ``ind`` on every rank of the worker and note the outcome on it; its interim losses."""
        if ind.uid < 0:
            ind.uid = self._session.mint_uid()
        ind.status = Status.PENDING
        # The folders first: placing a state may change the individual's entries (where a training
        # starts), which the row of a running individual must carry, as a flush may write it any moment.
        resume = self._folders.prepare(ind, redo)
        self._session.started(ind)  # a note only: its row is written if a flush finds it running
        if self._worker.size > 1:
            self._channel.send_task(ind, resume)
        with self._link.relaying.meanwhile():
            outcome = self.evaluator(ind, resume)
        outcome.apply_to(ind)
        ind.surrogate_data = self.evaluator.learn(outcome)
        completed, interrupted = outcome.status is Status.COMPLETED, outcome.status is Status.INTERRUPTED
        self._folders.finish(ind, completed, interrupted, itertools.chain(self.state.population, [ind]))
        self._refusal = outcome.refusal
        if completed:
            self._mean_period += (outcome.period - self._mean_period) / min(self.generation + 1, 20)
        elif outcome.status is Status.FAILED:
            self._failures.failed(ind, outcome.error)
        if debug >= 2:
            log.info(
                f"Island {self.island_idx}, worker {self.island_rank}, generation {self.generation}: {ind}"
            )
        return outcome.interim

    def _store(self, ind: Individual, interim: list[tuple[float, dict[str, float]]]) -> None:
        """Store this worker's evaluation (paying owed replacements), track it; stop on a failure if asked."""
        policy = self.migration
        replaced = policy.replacements(self.state.population) if policy.owed_replacements else []
        self.state.evaluated(ind, replaced)
        self._link.queue([ind], replaced)
        self._tracking.evaluated(lambda: EvaluationRecord.of(ind, interim, self.objectives))
        where = f"worker {self.island_rank} of island {self.island_idx}"
        if ind.status is Status.FAILED and self.on_failure == "stop":
            self._stops.request(f"{where} failed", abort=True)
        elif ind.status is Status.FAILED and self._refusal:
            # A helper of this library refused the setup (a LayoutError, say): every evaluation would.
            self._stops.request(f"{where} is misconfigured: {self._refusal}", abort=True)

    def _emigrate(self, debug: int) -> None:
        """Send emigrants as the migration policy decides; tell the island whom they deactivated."""
        departed: list[int] = []
        population, mint = self.state.population, self._session.mint_uid
        for sent in self.migration.emigrate(population, self.island_rank, mint, debug >= 3):
            self._folders.departed(sent.travellers, sent.emigrants, population)
            self.state.departed(sent.travellers, sent.target)
            self._link.emigrate(int(self.island_displs[sent.target]), self.island_idx, sent.travellers)
            departed += sent.departed
        if departed:
            self.state.deactivate(departed)
            self._link.queue([], departed)

    def _tick(self, logging_interval: int, debug: int) -> None:
        """After a generation: the run's progress line, and with ``debug >= 2`` the island's."""
        if debug >= 1:
            if self._progress.first_rank and self._progress.due():
                # The line counts the island peers' results that arrived meanwhile too (once per interval).
                self._take(self._link.receive(), debug)
            self._progress.tick()
        if debug >= 2 and self.generation % logging_interval == 0:
            planned = "" if self.generations == -1 else f"/{self.generations}"
            self._progress.island_line(
                f"worker 0 at generation {self.generation}{planned}", self.state.population
            )

    def _finish(self, debug: int) -> None:
        """End of the run: release sub-ranks, receive every message still in flight, close the checkpoint.

        The island first hears that this worker breeds no more. Every worker drains twice (matching collective
        calls whatever it was told of the topology): immigrants taken in during the first drain reach the
        island in the second, and between the two each island's head reports its final progress counts.
        """
        if self._worker.size > 1:
            self._channel.send_stop()
        self._link.tell(retire=True)
        self._link.finish(self._drain_step)
        if self._progress.counting:
            self._progress.report()
        self._link.finish(self._drain_step)
        self._folders.close(self.state.population)  # every immigrant was taken in: leases are lifted
        self._snapshot(force=True)
        self._session.close()
        self._tracking.close(self._stops.reason)
        warn_owed_replacements(self.migration, self.island_idx)
        self._progress.end(self._stops.reason, self.state.population, debug >= 2)

    def _drain_step(self) -> bool:
        """At the end of the run: apply what arrived; pass news on as often as while evaluating (linger)."""
        self._stops.check()
        arrivals = self._link.receive()
        self._take(arrivals)
        if self._link.linger_due():
            self._link.tell(hold=True)
        return bool(arrivals)
