"""Island runs with failing evaluations, stop requests, time limits and huge individuals.

Modes (``--mode``):

- ``raise``: about 20 % of evaluations raise, 5 % return NaN and 5 % an infinite loss, on random ranks;
- ``subrank``: with 2-rank workers, the second rank of a worker raises in some evaluations;
- ``subrank-collective``: the second rank raises while the first waits for it in a collective operation on
  the communicator the loss function was handed;
- ``subrank-foreign-collective``: the same on a communicator the user split from ``COMM_WORLD`` themselves;
- ``stop-on-failure``: one evaluation raises and ``on_failure="stop"``;
- ``misconfigured``: from the third evaluation of rank 0's worker on, its loss function raises a
  ``LayoutError`` on every rank of the worker, as the torch helper does for two ranks of a worker on one
  GPU; the run keeps ``on_failure="continue"``;
- ``sleep``: every evaluation sleeps ``--sleep`` seconds (for signals and time limits);
- ``big``: every individual carries a 10 MB array, far above MPI's eager limit.

Prints one ``RESULT`` line on rank 0 with counts gathered from the worker roots.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from propulate import Islands, Status
from propulate.errors import LayoutError, RunAbortedError
from propulate.propagators import Propagator
from propulate.utils import get_default_propagator

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True)
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=20)
parser.add_argument("--num-islands", type=int, default=2)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--time-limit", type=float, default=None)
parser.add_argument("--grace", type=float, default=5.0)
parser.add_argument("--failure-timeout", type=float, default=300.0)
args = parser.parse_args()

limits = {"x": (-5.0, 5.0), "y": (-5.0, 5.0)}
chaos = random.Random(1234 + world.rank)  # which evaluations fail, independent of the optimizer's RNG
evaluations = 0


def loss(params, comm=MPI.COMM_SELF):
    global evaluations
    evaluations += 1
    value = params["x"] ** 2 + params["y"] ** 2
    if args.sleep:
        # Tell a test that an evaluation is running, so that it can signal in the middle of one.
        (Path(args.checkpoint) / f"evaluating-{world.rank}").touch()
        time.sleep(args.sleep)
    if args.mode == "raise":
        draw = chaos.random()
        if draw < 0.2:
            raise RuntimeError(f"injected failure on rank {world.rank}")
        if draw < 0.25:
            return math.nan
        if draw < 0.3:
            return math.inf
    elif args.mode == "subrank" and comm.rank == 1 and chaos.random() < 0.3:
        raise RuntimeError("injected failure on a sub-rank")
    elif args.mode in ("subrank-collective", "subrank-foreign-collective"):
        if comm.rank == 1 and evaluations == 3:
            raise RuntimeError("injected failure on a sub-rank before the reduction")
        reducing = comm if args.mode == "subrank-collective" else foreign
        value = reducing.allreduce(value) / comm.size
    elif args.mode == "stop-on-failure" and world.rank == 0 and evaluations == 5:
        raise RuntimeError("injected fatal failure")
    elif args.mode == "misconfigured" and world.rank < args.ranks_per_worker and evaluations >= 3:
        raise LayoutError("GPU placement: ranks 0, 1 of this worker would share GPU 0 (injected)")
    return value


class WithPayload(Propagator):
    """Wraps a propagator and attaches 10 MB to every offspring, so every message is 10 MB."""

    def __init__(self, inner: Propagator) -> None:
        super().__init__(-1, 1)
        self.inner = inner

    def __call__(self, inds):
        child = self.inner(inds)[0]
        child.payload = np.ones(10 * 2**20 // 8)
        return [child]

    @property
    def breeding_pool(self):
        return self.inner.breeding_pool


# A worker's ranks as the user might group them without propulate (its collectives cannot be interrupted).
foreign = world.Split(world.rank // args.ranks_per_worker)
rng = random.Random(99 + world.rank)
propagator = get_default_propagator(4, limits, rng=rng)
if args.mode == "big":
    propagator = WithPayload(propagator)
islands = Islands(
    loss,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=0.5,
    pollination=False,
    checkpoint_path=args.checkpoint,
    ranks_per_worker=args.ranks_per_worker,
    on_failure="stop" if args.mode == "stop-on-failure" else "continue",
    time_limit=args.time_limit,
    grace_period=args.grace,
    failure_timeout=args.failure_timeout,
)
start = time.monotonic()
try:
    islands.propulate(debug=0)
except RunAbortedError as err:
    # One line in one write per rank: a test counts them, and tracebacks of several ranks interleave.
    print(f"rank {world.rank} aborted: {err}", flush=True)
    sys.exit(1)
elapsed = time.monotonic() - start
summary = islands.summarize(top_n=5, debug=0)

propulator = islands.propulator
result = {}
if propulator.is_worker_root:
    layout = islands.layout
    population = propulator.population
    signature = sorted((ind.uid, ind.active, int(ind.status)) for ind in population)
    assert all(s == signature for s in layout.island_comm.allgather(signature)), "island populations differ"
    mine = [ind for ind in population if ind.migration_steps == 0 and ind.island == layout.island_index]
    statuses = [int(ind.status) for ind in mine if ind.rank == layout.island_comm.rank]
    gathered = layout.propulate_comm.gather((statuses, propulator.generation, evaluations))
    if layout.propulate_comm.rank == 0:
        best = [ind for worker in summary for ind in worker]
        result = {
            "generations": [g for _, g, _ in gathered],
            "evaluations": sum(e for _, _, e in gathered),
            "completed": sum(s.count(int(Status.COMPLETED)) for s, _, _ in gathered),
            "failed": sum(s.count(int(Status.FAILED)) for s, _, _ in gathered),
            "bred": sum(len(s) for s, _, _ in gathered),
            "summary_losses": [ind.loss for ind in best],
            "summary_statuses": sorted({int(ind.status) for ind in best}),
            "elapsed": elapsed,
        }
if world.rank == 0:
    print("RESULT " + json.dumps(result), flush=True)
