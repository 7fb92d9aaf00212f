"""The island model: a thin factory that lays out workers and islands and builds each worker's loop."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from .individual import Individual
from .migration import Topology, messages_per_round
from .migrator import Migrator
from .mpi.layout import build_layout
from .pollinator import Pollinator
from .propagators.base import Propagator, SelectMax, SelectMin
from .propulator import Propulator
from .validation import check_probability

__all__ = ["Islands"]

log = logging.getLogger("propulate")


class Islands:
    """Asynchronous island model over ``MPI.COMM_WORLD``.

    ``COMM_WORLD`` is split into workers of ``ranks_per_worker`` consecutive ranks and the workers into
    ``num_islands`` islands of contiguous workers. Each worker runs a :class:`Propulator`; islands exchange
    individuals by migration or pollination over ``migration_topology``.

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(params)``; with ``ranks_per_worker > 1`` ``loss_fn(params, comm)``, called on every rank of
        the worker with the same parameters and the worker's communicator (the value of its first rank
        counts).
    propagator : Propagator
        The evolutionary operator.
    rng : random.Random or int
        This rank's generator (seed it differently on every rank), or an int seed, the same on every rank,
        from which each rank derives its own (see :class:`Propulator`).
    generations : int >= -1
        Evaluations per worker; ``-1`` runs until stopped.
    num_islands : int >= 1
        Number of islands (ignored when ``island_sizes`` is given). More than there are workers give one
        island per worker, with a warning, so that a script written for a cluster also runs on one rank;
        a ``migration_topology`` array given for ``num_islands`` islands then keeps the entries of those that
        exist, and a name is built for them.
    island_sizes : array_like of int, optional
        Workers per island, summing to the number of workers. Default: as equal as possible.
    migration_topology : {"hypercube", "complete", "ring"}, array_like of int, or None
        How many individuals island ``i`` sends to island ``j`` per migration event, one message per non-zero
        entry: an int array of shape ``(num_islands, num_islands)``, or a name of
        :data:`propulate.migration.TOPOLOGIES` built for the islands that exist. ``"hypercube"`` (the default,
        also ``None``): one to each island ``(i + 2**j) mod I``, ``j < ceil(log2 I)``
        (:func:`~propulate.migration.hypercube_topology`); ``"complete"``: one to every other island,
        Propulate 1.2.2's default; ``"ring"``: one to island ``(i + 1) mod I``. The default changed because
        the complete topology's ``I p (I - 1)`` messages and immigrants per round of generations (``p`` the
        migration probability) grow with the square of the number of islands ``I``: at ``p = 0.9``, 50.4
        for 8 islands (a worker of 8 one-worker islands held about 370 individuals after evaluating 50) and
        899,100 for 1,000; the hypercube's ``I p ceil(log2 I)`` are 21.6 (about 190 held) and 9,000. Pass
        ``"complete"`` for 1.2.2's behaviour; up to 3 islands the two are the same.
    migration_probability : float in [0, 1]
        Probability of a migration event per island per round of its workers' generations (each worker
        starts one with probability ``migration_probability / island size`` after each generation).
    emigration_propagator, immigration_propagator : Propagator class
        Select emigrants (default the best) and, for pollination, the individuals immigrants replace
        (default the worst).
    pollination : bool
        Send copies that replace individuals on arrival, instead of moving individuals.
    checkpoint_path : str or pathlib.Path
        Directory for checkpoints; created if missing.
    ranks_per_worker : int >= 1
        Ranks per worker; must divide the number of ranks.
    surrogate_factory : callable, optional
        Makes each worker's surrogate (early stopping of generator losses); see :class:`Propulator`.
    resume : bool, optional
        Continue from the checkpoint in ``checkpoint_path`` (default), or start fresh; see
        :class:`Propulator`. Resuming onto other numbers of ranks, islands or ranks per worker redistributes
        the checkpoint (:func:`propulate.checkpoint.plan_resume`).
    on_failure, accept_inf, time_limit, grace_period, failure_timeout
        Failed evaluations, stop signals and wall-clock budgets; see :class:`Propulator`.
    keep_best_folders : int in [0, 100]
        Evaluation folders kept after the run; see :class:`Propulator`.
    objectives : None, int, sequence of str, or mapping of str to {"minimize", "maximize"}
        Several objectives; see :class:`Propulator` and :mod:`propulate.objectives`.
    trackers : Tracker or sequence of Tracker, optional
        Experiment trackers (TensorBoard, MLflow) called on each worker's first rank after each of its
        evaluations; see :class:`Propulator` and :doc:`/trackers`.

    Attributes
    ----------
    propulator : Propulator
        This worker's loop: a :class:`propulate.Pollinator` with ``pollination``, else a
        :class:`propulate.Migrator`. It holds the checkpoint's population and generation counter from
        construction on (see :class:`Propulator`).

    Raises
    ------
    ValueError
        On every rank, for inconsistent sizes, an unknown topology name, a topology of the wrong shape or
        with negative entries, or out-of-range probabilities.
    propulate.checkpoint.CheckpointError
        On every rank, if the checkpoint in ``checkpoint_path`` cannot be used.
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        propagator: Propagator,
        rng: random.Random | int | None = None,
        generations: int = -1,
        num_islands: int = 1,
        island_sizes: Sequence[int] | None = None,
        migration_topology: Any = None,
        migration_probability: float = 0.9,
        emigration_propagator: type[Propagator] = SelectMin,
        immigration_propagator: type[Propagator] = SelectMax,
        pollination: bool = True,
        checkpoint_path: str | Path = "./",
        ranks_per_worker: int = 1,
        surrogate_factory: Callable[[], Any] | None = None,
        *,
        resume: bool | None = None,
        on_failure: str = "continue",
        accept_inf: bool = False,
        time_limit: float | None = None,
        grace_period: float | None = None,
        failure_timeout: float = 300.0,
        keep_best_folders: int = 0,
        objectives: Any = None,
        trackers: Any = None,
    ) -> None:
        check_probability("migration_probability", migration_probability)
        world = MPI.COMM_WORLD
        layout = build_layout(world, ranks_per_worker, num_islands, island_sizes)
        asked, num_islands = num_islands, len(layout.island_counts)
        # Fewer workers than islands (see build_layout): the islands that exist keep their entries.
        if num_islands < asked and np.shape(migration_topology) == (asked, asked):
            migration_topology = np.asarray(migration_topology)[:num_islands, :num_islands]
        # A name stays a name: each worker computes its own island's targets (see Topology).
        topology = Topology.of(migration_topology, num_islands)
        island_size = int(layout.island_counts[layout.island_index])
        if world.rank == 0:
            kind = "pollination" if pollination else "migration"
            exchange = (
                "no migration (one island)"
                if num_islands == 1
                else f"{kind} with probability {migration_probability}"
            )
            sizes = layout.island_counts.tolist()
            log.info(
                f"Islands: {world.size} ranks, {world.size // ranks_per_worker} worker(s) of "
                f"{ranks_per_worker} rank(s), {num_islands} island(s) of sizes {sizes}, {exchange}."
            )
            if num_islands > 1:
                described = "given as an array" if topology.name is None else repr(topology.name)
                targets = topology.target_counts()
                fewest, most = int(targets.min()), int(targets.max())
                per_island = str(most) if fewest == most else f"{fewest} to {most}"
                log.info(
                    f"Islands: migration topology {described}: {per_island} target island(s) per island, "
                    f"{messages_per_round(topology, migration_probability):.4g} message(s) per round of "
                    "generations."
                )
        self.layout = layout
        # As in 1.2.2: a Pollinator or a Migrator, both a Propulator with the matching migration policy.
        self.propulator: Propulator = (Pollinator if pollination else Migrator)(
            loss_fn,
            propagator,
            rng,
            generations=generations,
            checkpoint_path=checkpoint_path,
            migration_topology=topology,
            migration_prob=float(migration_probability) / island_size,
            emigration_propagator=emigration_propagator,
            surrogate_factory=surrogate_factory,
            immigration_propagator=immigration_propagator,
            resume=resume,
            on_failure=on_failure,
            accept_inf=accept_inf,
            time_limit=time_limit,
            grace_period=grace_period,
            failure_timeout=failure_timeout,
            keep_best_folders=keep_best_folders,
            objectives=objectives,
            layout=layout,
            trackers=trackers,
        )

    def propulate(self, logging_interval: int = 10, debug: int = 1) -> None:
        """Run the optimization on every rank (see :meth:`Propulator.propulate`)."""
        self.propulator.propulate(logging_interval, debug)

    @property
    def pareto_front(self) -> list[Individual]:
        """The run's Pareto front with several objectives, on every rank (:attr:`Propulator.pareto_front`)."""
        return self.propulator.pareto_front

    @property
    def best(self) -> Individual:
        """The best individual of the run, on every rank after ``propulate()`` (:attr:`Propulator.best`)."""
        return self.propulator.best

    @property
    def best_params(self) -> dict[str, Any]:
        """The parameters of :attr:`best` (:attr:`Propulator.best_params`)."""
        return self.propulator.best_params

    @property
    def best_loss(self) -> float:
        """The loss of :attr:`best` (:attr:`Propulator.best_loss`)."""
        return self.propulator.best_loss

    def top(self, n: int = 5) -> list[Individual]:
        """Return the ``n`` best distinct individuals of the whole run (:meth:`Propulator.top`)."""
        return self.propulator.top(n)

    def summarize(self, top_n: int = 3, debug: int = 1) -> list[list[Individual]]:
        """Log and return the best ``top_n`` individuals of each worker (see :meth:`Propulator.summarize`)."""
        return self.propulator.summarize(top_n, debug)

    def evolve(self, top_n: int = 3, logging_interval: int = 10, debug: int = 1) -> list[list[Individual]]:
        """Run :meth:`propulate` then :meth:`summarize`; return the summary."""
        self.propulate(logging_interval, debug)
        return self.summarize(top_n, debug)
