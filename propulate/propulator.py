"""The asynchronous loop of one worker: breed, evaluate, share, migrate — never wait for anybody.

Every worker of an island runs the same loop. It takes in whatever its island's other workers sent, breeds
one individual from the island's population with the propagator, evaluates it (on all ranks of a multi-rank
worker), stores it and sends it to every other worker of the island, and, with the migration probability,
sends emigrants to other islands. Generations are a per-worker counter; there is no global barrier until
the end of the run, where every message still in flight is received before ``propulate()`` returns.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from .evaluation import Evaluator, WorkerChannel
from .individual import Individual
from .migration import IsolatedIslands, MigrationPolicy, check_topology
from .mpi.messaging import Mailbox, Tag, drain
from .population import Population
from .propagators.base import Propagator, SelectMax, SelectMin, as_list

__all__ = ["Propulator"]

log = logging.getLogger("propulate")

# A uid is (propulate-communicator rank of the introducing worker, its running count): unique per run.
_UID_SHIFT = 40


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


class Propulator:
    """The asynchronous evolutionary optimizer of one island's worker.

    Used directly it optimizes one island without migration; :class:`propulate.Islands` builds one per
    worker with the communicators of an island model.

    Parameters
    ----------
    loss_fn : callable
        The function minimized: ``loss_fn(params) -> float`` (or ``loss_fn(params, comm)`` with multi-rank
        workers). It may also return a mapping with a ``"loss"`` entry and further metrics, or yield interim
        losses as a generator.
    propagator : Propagator
        Breeds a new individual from the island's population.
    rng : random.Random
        This worker's generator (seed it differently on every rank).
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
    migration_topology : array_like of int, optional
        Shape ``(num_islands, num_islands)``; entry ``(i, j)`` is how many individuals island ``i`` sends to
        island ``j`` per migration event. Default: one to every other island.
    migration_prob : float in [0, 1]
        Probability that this worker starts a migration event after one of its generations.
    emigration_propagator : Propagator class
        Selects emigrants (default: the best, :class:`SelectMin`).
    island_displs, island_counts : array_like of int, optional
        For each island, the ``propulate_comm`` rank of its first worker and its number of workers.
        Default: gathered from all workers.
    surrogate_factory : callable, optional
        Reserved for early stopping with surrogates; accepted for compatibility.
    immigration_propagator : Propagator class
        For pollination, selects the individuals that immigrants replace (default: the worst).
    pollination : bool
        Send copies (pollination) instead of moving individuals (migration).

    Raises
    ------
    ValueError
        For out-of-range arguments (named in the message).
    TypeError
        If ``loss_fn`` or ``propagator`` is not callable, or ``loss_fn`` cannot take the worker communicator.
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        propagator: Propagator,
        rng: random.Random | None = None,
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
    ) -> None:
        self.generations = _check_int("generations", generations, -1)
        if not callable(propagator):
            raise TypeError(f"propagator: expected a Propagator, got {type(propagator).__name__}")
        if (
            isinstance(migration_prob, bool)
            or not isinstance(migration_prob, (int, float))
            or not (0 <= migration_prob <= 1)
        ):
            raise ValueError(f"migration_prob: expected a number in [0, 1], got {migration_prob!r}")
        self.loss_fn = loss_fn
        self.propagator = propagator
        self.rng = rng if rng is not None else random.Random()
        self.island_idx = int(island_idx)
        self.island_comm = island_comm
        self.propulate_comm = propulate_comm
        self.worker_sub_comm = worker_sub_comm
        self.surrogate_factory = surrogate_factory
        self.evaluator = Evaluator(loss_fn, worker_sub_comm)

        self._worker = worker_sub_comm.Dup()
        self.is_worker_root = self._worker.rank == 0
        self._channel = WorkerChannel(self._worker)
        self.checkpoint_path = Path(checkpoint_path)
        self.checkpoint_path.mkdir(parents=True, exist_ok=True)

        self._population = Population()
        self.generation = 0
        self._introduced = 0
        self._next_owner = 0
        self._owed_replacements = 0
        self.pollination = bool(pollination)
        self.start_time = math.nan
        self.island_rank = -1
        if not self.is_worker_root:
            self.migration: IsolatedIslands | MigrationPolicy = IsolatedIslands()
            return
        self._island = island_comm.Dup()
        self._world = propulate_comm.Dup()
        self._island_mail = Mailbox(self._island)
        self._world_mail = Mailbox(self._world)
        self.island_rank = self._island.rank
        self._island_peers = [r for r in range(self._island.size) if r != self.island_rank]
        if island_displs is None or island_counts is None:
            islands = np.asarray(self._world.allgather(self.island_idx))
            island_counts = np.bincount(islands)
            island_displs = np.concatenate(([0], np.cumsum(island_counts)[:-1]))
        self.island_displs = np.asarray(island_displs, dtype=int)
        self.island_counts = np.asarray(island_counts, dtype=int)
        topology = check_topology(migration_topology, len(self.island_counts))
        # Islands that send nothing may still receive, so every island of a connected model has a policy.
        if topology.any():
            self.migration = MigrationPolicy(
                self.island_idx,
                topology,
                float(migration_prob),
                emigration_propagator,
                immigration_propagator,
                pollination,
                self.rng,
            )
        else:
            self.migration = IsolatedIslands()
            self.pollination = False

    @property
    def population(self) -> list[Individual]:
        """The individuals this worker knows of, in arrival order (on sub-ranks: after ``propulate()``)."""
        return list(self._population)

    # ----------------------------------------------------------------------------------------------- run

    def propulate(self, logging_interval: int = 10, debug: int = -1) -> None:
        """Run the optimization; collective over all ranks of all workers.

        Each worker evaluates ``generations`` individuals; when it returns, every message has been
        received and every worker of an island holds the same population.

        Parameters
        ----------
        logging_interval : int >= 1
            Generations between progress lines (logged by each island's first worker).
        debug : int
            Verbosity: <= 0 quiet, 1 progress and summary, 2 every evaluation, 3 also migration events.

        Raises
        ------
        ValueError
            If ``logging_interval`` is not a positive int.
        """
        _check_int("logging_interval", logging_interval, 1)
        self.start_time = time.time()
        if self.is_worker_root:
            self._work(logging_interval, debug)
        else:
            self._serve()
        if self._worker.size > 1:
            # Sub-ranks hold their worker's population too, so user code may read it on any rank.
            members = self._worker.bcast(self.population if self.is_worker_root else None, root=0)
            if not self.is_worker_root:
                self._population = Population()
                self._population.extend(members)
        _release_torch_group()

    def _serve(self) -> None:
        """Sub-ranks of a multi-rank worker: evaluate what the root hands over until it says stop."""
        while (ind := self._channel.next_task()) is not None:
            self.evaluator.run_only(ind)

    def _work(self, logging_interval: int, debug: int) -> None:
        while self.generations == -1 or self.generation < self.generations:
            self._receive_updates()
            self._receive_immigrants(debug)
            ind = self._breed()
            self._evaluate(ind, debug)
            self._introduce([ind], self._select_replaced() if self._owed_replacements else [])
            if self.migration.wants_to_emigrate():
                self._emigrate(debug)
            self.generation += 1
            if debug >= 1 and self.island_rank == 0 and self.generation % logging_interval == 0:
                self._log_progress()
        self._finish()
        if debug >= 1 and self.island_rank == 0:
            log.info(f"Island {self.island_idx}: done; {self._status_text()}.")

    def _log_progress(self) -> None:
        planned = "" if self.generations == -1 else f"/{self.generations}"
        log.info(
            f"Island {self.island_idx}: worker 0 at generation {self.generation}{planned}; "
            f"{self._status_text()}."
        )

    def _status_text(self) -> str:
        best = self._population.best(1)
        best_loss = f"{best[0].loss:.6g}" if best else "n/a"
        elapsed = time.time() - self.start_time
        return f"{len(self._population)} individuals known, best loss {best_loss}, {elapsed:.1f} s elapsed"

    def _breed(self) -> Individual:
        pool = self.propagator.breeding_pool if isinstance(self.propagator, Propagator) else None
        parents = self._population.best(pool) if pool is not None else self._population.active()
        offspring = as_list(self.propagator(parents))
        if not offspring or not isinstance(offspring[0], Individual):
            raise TypeError(f"propagator {self.propagator!r} returned {offspring!r}; expected individuals")
        ind = offspring[0]
        if ind.uid >= 0:
            ind = ind.child()  # the propagator passed a population member through
        ind.generation = self.generation
        ind.rank = self.island_rank
        ind.island = self.island_idx
        ind.current = self.island_rank
        ind.migration_steps = 0
        ind.migration_history = str(self.island_idx)
        ind.loss = math.inf
        ind.active = True
        return ind

    def _evaluate(self, ind: Individual, debug: int) -> None:
        if self._worker.size > 1:
            self._channel.send_task(ind)
        outcome = self.evaluator(ind)
        ind.loss = outcome.loss
        ind.metrics = outcome.metrics
        ind.evalperiod = outcome.period
        ind.evaltime = time.time()
        if debug >= 2:
            log.info(
                f"Island {self.island_idx}, worker {self.island_rank}, generation {self.generation}: {ind}"
            )

    def _introduce(self, added: list[Individual], deactivated: list[int]) -> None:
        """Store new individuals and deactivations here and tell the island's other workers."""
        for ind in added:
            ind.uid = (self._world.rank << _UID_SHIFT) | self._introduced
            self._introduced += 1
            self._population.add(ind)
        for uid in deactivated:
            self._population.deactivate(uid)
        self._island_mail.send((added, deactivated), self._island_peers, Tag.ISLAND_UPDATE)

    def _receive_updates(self) -> bool:
        messages = self._island_mail.receive(Tag.ISLAND_UPDATE)
        for _, (added, deactivated) in messages:
            self._population.extend(added)
            for uid in deactivated:
                self._population.deactivate(uid)
        return bool(messages)

    # ------------------------------------------------------------------------------------- migration

    def _emigrate(self, debug: int) -> None:
        policy = self.migration
        assert isinstance(policy, MigrationPolicy)
        departed: list[int] = []
        for target, count in policy.targets():
            active = self._population.active()
            if not policy.pollination:
                active = [ind for ind in active if ind.current == self.island_rank]
            emigrants = policy.select_emigrants(active, count)
            if not emigrants:
                continue
            travellers = []
            for emigrant in emigrants:
                traveller = emigrant.copy()
                traveller.uid = -1
                traveller.active = True
                traveller.migration_steps += 1
                traveller.migration_history += f"-{target}"
                travellers.append(traveller)
                if not policy.pollination:
                    self._population.deactivate(emigrant.uid)
                    departed.append(emigrant.uid)
            self._world_mail.send(
                (self.island_idx, travellers), [int(self.island_displs[target])], Tag.EMIGRANTS
            )
            if debug >= 3:
                kind = "pollinators" if policy.pollination else "emigrants"
                log.info(
                    f"Island {self.island_idx}, worker {self.island_rank}: sent {len(travellers)} {kind} "
                    f"to island {target}."
                )
        if departed:
            self._introduce([], departed)

    def _receive_immigrants(self, debug: int = -1) -> bool:
        messages = self._world_mail.receive(Tag.EMIGRANTS)
        for _, (origin, travellers) in messages:
            replaced: list[int] = []
            if self.pollination:
                self._owed_replacements += len(travellers)
                replaced = self._select_replaced()
            for traveller in travellers:
                traveller.current = self._next_owner
                self._next_owner = (self._next_owner + 1) % self._island.size
            self._introduce(travellers, replaced)
            if debug >= 3:
                log.info(
                    f"Island {self.island_idx}: {len(travellers)} immigrant(s) from island {origin}, "
                    f"{len(replaced)} individual(s) replaced."
                )
        return bool(messages)

    def _select_replaced(self) -> list[int]:
        """Pollination: choose whom owed immigrants replace.

        An island with too few active individuals pays the rest of its debt as soon as it has them.
        """
        assert isinstance(self.migration, MigrationPolicy)
        victims = self.migration.select_replaced(self._population.active(), self._owed_replacements)
        self._owed_replacements -= len(victims)
        return [victim.uid for victim in victims]

    def _finish(self) -> None:
        """End of the run: release sub-ranks, then receive every message still in flight."""
        if self._worker.size > 1:
            self._channel.send_stop()
        drain(self._world_mail, lambda: self._receive_immigrants() | self._receive_updates())
        drain(self._island_mail, self._receive_updates)
        if self._owed_replacements:
            log.warning(
                f"Island {self.island_idx}: {self._owed_replacements} pollinator(s) found no active "
                "individual "
                "to replace and were added without replacement."
            )

    # --------------------------------------------------------------------------------------- summary

    def summarize(self, top_n: int = 1, debug: int = 1) -> list[list[Individual]]:
        """Log and return the best ``top_n`` distinct individuals of each worker; collective over all ranks.

        Parameters
        ----------
        top_n : int >= 0
            How many individuals per worker; more than exist returns what exists.
        debug : int
            Logs the results of each island (first rank only) when >= 1.

        Returns
        -------
        list of list of Individual
            One list per worker (in ``propulate_comm`` order), best first; the same on every rank.

        Raises
        ------
        ValueError
            If ``top_n`` is not a non-negative int (on every rank).
        """
        _check_int("top_n", top_n, 0)
        gathered: list[list[Individual]] | None = None
        if self.is_worker_root:
            gathered = self._world.allgather(self._population.distinct_best(top_n))
        gathered = self._worker.bcast(gathered, root=0)
        assert gathered is not None
        if debug >= 1 and self.is_worker_root and self._world.rank == 0:
            for island, first in enumerate(self.island_displs):
                lines = "\n".join(f"  {i + 1}. {ind}" for i, ind in enumerate(gathered[first]))
                log.info(f"Top {len(gathered[first])} result(s) on island {island}:\n{lines}")
        return gathered


def _release_torch_group() -> None:
    """Tear down the worker's torch process group if the helper created one."""
    distributed = sys.modules.get("propulate.utils.distributed")
    if distributed is not None:
        distributed.destroy_worker_process_group()
