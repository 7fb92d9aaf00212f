"""Event-driven simulation of one island of asynchronous workers, driving real propagator objects.

Each simulated worker owns its propagator and its view of the population, and does what
``Propulator._work`` does, in simulated time instead of wall-clock time:

1. breed: ``propagator(pool)`` with ``pool`` as the loop passes it (``population.best(k)`` when the
   propagator's ``breeding_pool`` is ``k``, every active individual the worker knows when it is ``None``);
   the offspring gets ``uid``, ``rank`` (the worker) and ``generation`` (the worker's counter);
2. evaluate: the evaluation takes a random time (see :func:`draw_time`);
3. store its own result and ``observe`` it, then send it to every other worker: it arrives at each a time
   drawn uniformly from [0, ``lag``] later (0: at once);
4. take in what arrived meanwhile (``observe`` each, in arrival order), then breed again.

Before the first breeding every propagator is bound with ``bind(rank, workers)``. Evaluations are started
until ``evaluations`` have been started; the simulation ends when the last one has been delivered. The
simulation is deterministic for a given seed: all randomness comes from the generators passed in.

Only the island's own stream is simulated: no migration, no failures, no checkpoint.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from propulate.individual import Individual, Status
from propulate.population import Population
from propulate.propagators import Propagator

#: Evaluation-time models, each a function of the generator and a spread: positive times around 1.
TIME_MODELS: dict[str, Callable[[np.random.Generator, float], float]] = {
    # Median 1, log-standard deviation ``spread``: a few long evaluations, as with training runs.
    "lognormal": lambda rng, spread: float(rng.lognormal(0.0, spread)),
    # Uniform in [1 - spread, 1 + spread] (spread < 1).
    "uniform": lambda rng, spread: float(rng.uniform(1.0 - spread, 1.0 + spread)),
    # Every evaluation takes exactly 1: the workers stay in lockstep, offset by their start.
    "constant": lambda rng, spread: 1.0,
}


def draw_time(rng: np.random.Generator, model: str, spread: float) -> float:
    """Return one evaluation time (in units of the typical evaluation) from ``TIME_MODELS[model]``."""
    return TIME_MODELS[model](rng, spread)


@dataclass
class Worker:
    """One simulated worker: its propagator, its population and the results delivered to it."""

    rank: int
    propagator: Propagator
    population: Population = field(default_factory=Population)
    inbox: list[Individual] = field(default_factory=list)
    generation: int = 0

    def take(self, ind: Individual) -> None:
        """Store ``ind`` and show it to the propagator, as ``Propulator._introduce`` does."""
        self.population.add(ind)
        self.propagator.observe(ind)

    def breed(self) -> Individual:
        pool_size = self.propagator.breeding_pool
        pool = self.population.active() if pool_size is None else self.population.best(pool_size)
        ind = self.propagator(pool)[0]
        if ind.uid >= 0:
            ind = ind.child()
        ind.generation, ind.rank, ind.island, ind.current = self.generation, self.rank, 0, self.rank
        ind.status, ind.loss = Status.PENDING, math.inf
        return ind


@dataclass
class Outcome:
    """What one simulated run gives: the best loss and each worker's propagator, for inspection."""

    best: float
    evaluations: int
    makespan: float
    propagators: list[Propagator]
    losses: list[float]


def simulate(
    propagators: list[Propagator],
    loss: Callable[[np.ndarray], float],
    evaluations: int,
    rng: np.random.Generator,
    time_model: str = "lognormal",
    spread: float = 0.5,
    lag: float = 0.0,
) -> Outcome:
    """Run one island of ``len(propagators)`` workers for ``evaluations`` evaluations.

    Parameters
    ----------
    propagators : list of Propagator
        One per worker, fresh; worker ``i`` is bound with ``bind(i, len(propagators))``.
    loss : callable
        Maps an individual's ``position`` (shape ``(n_dims,)``) to its loss.
    evaluations : int >= 1
        Evaluations started in all.
    rng : numpy.random.Generator
        Draws the evaluation times.
    time_model : {"lognormal", "uniform", "constant"}
        How evaluation times are drawn (see ``TIME_MODELS``).
    spread : float >= 0
        The spread of the time model.
    lag : float >= 0
        The longest time a result takes to reach another worker (each delivery uniform in [0, ``lag``]).

    Returns
    -------
    Outcome
        The best loss, the propagators and the losses in completion order.
    """
    workers = [Worker(rank, propagator) for rank, propagator in enumerate(propagators)]
    for worker in workers:
        worker.propagator.bind(worker.rank, len(workers))
    events: list[tuple[float, int, int, int, Individual]] = []  # (time, order, kind, worker, individual)
    started_at: dict[int, float] = {}  # uid -> start of its evaluation
    order = 0
    started = 0
    completed: list[float] = []
    COMPLETE, DELIVER = 0, 1  # noqa: N806

    def start(worker: Worker, now: float) -> None:
        nonlocal order, started
        ind = worker.breed()
        ind.uid = started
        started_at[ind.uid] = now
        started += 1
        worker.generation += 1
        heapq.heappush(events, (now + draw_time(rng, time_model, spread), order, COMPLETE, worker.rank, ind))
        order += 1

    for worker in workers:
        if started < evaluations:
            start(worker, 0.0)
    now = 0.0
    while events:
        now, _, kind, rank, ind = heapq.heappop(events)
        worker = workers[rank]
        if kind == DELIVER:
            worker.inbox.append(ind)
            continue
        ind.loss = float(loss(ind.position))
        ind.status = Status.COMPLETED
        ind.evaltime = now
        ind.evalperiod = now - started_at.pop(ind.uid)
        completed.append(ind.loss)
        worker.take(ind)
        for other in workers:
            if other is not worker:
                if lag > 0.0:
                    heapq.heappush(events, (now + rng.uniform(0.0, lag), order, DELIVER, other.rank, ind))
                    order += 1
                else:
                    other.inbox.append(ind)
        for arrived in worker.inbox:
            worker.take(arrived)
        worker.inbox.clear()
        if started < evaluations:
            start(worker, now)
    return Outcome(min(completed), len(completed), now, [w.propagator for w in workers], completed)
