"""Early stopping under MPI: a generator loss with a collective per step, and a surrogate that cancels.

Every rank of a worker runs the same generator; each step starts with an all-reduce over the worker's
communicator, as a DDP training epoch would. If the ranks of a worker ever disagreed about leaving the loop,
one would wait in that all-reduce forever and the launch would time out. The curve of an individual with
parameter ``x`` is ``x + 1 / (k + 1)`` for epochs ``k = 0 .. EPOCHS - 1``, so a pruned individual's loss
tells at which epoch it was stopped.

Modes (``--mode``): ``run`` (a plain run, or a resumed one), ``subrank-fail`` (the worker's second rank
raises after the collective of the third epoch of every third evaluation it starts, whatever the search
bred: the evaluation fails on every rank of the worker, and nobody hangs).
Prints one ``RESULT`` line on rank 0 with what the worker roots saw.
"""

from __future__ import annotations

import argparse
import json
import math
import random

from mpi4py import MPI

from propulate import Islands, Status
from propulate.surrogate import DynamicSurrogate, LogLinearSurrogate, NullSurrogate, StaticSurrogate
from propulate.utils import get_default_propagator

EPOCHS = 10
world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=12)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--surrogate", choices=("static", "loglinear", "dynamic", "null"), default="static")
parser.add_argument("--mode", choices=("run", "subrank-fail"), default="run")
args = parser.parse_args()

epochs_run = 0  # epochs this rank started, over the whole run
evaluations_run = 0  # evaluations this rank started


def curve(x: float, epoch: int) -> float:
    return x + 1.0 / (epoch + 1)


def loss(params, comm=MPI.COMM_SELF):
    global epochs_run, evaluations_run
    evaluations_run += 1
    for epoch in range(EPOCHS):
        epochs_run += 1
        comm.allreduce(epoch)  # every rank of the worker takes part in every epoch it starts
        if args.mode == "subrank-fail" and comm.rank == 1 and epoch == 2 and evaluations_run % 3 == 0:
            raise RuntimeError("a sub-rank failed in the middle of training")
        # Only the first rank's value counts: the others yield nonsense.
        yield curve(params["x"], epoch) if comm.rank == 0 else 1e9


limits = {"x": (0.0, 4.0), "y": (-1.0, 1.0)}
rng = random.Random(42 + world.rank)
factory = {
    "static": StaticSurrogate,
    "loglinear": LogLinearSurrogate,
    "dynamic": lambda: DynamicSurrogate(limits, min_runs=3),
    "null": NullSurrogate,
}[args.surrogate]
islands = Islands(
    loss,
    get_default_propagator(4, limits, rng=rng),
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=0.3,
    pollination=False,
    checkpoint_path=args.checkpoint,
    ranks_per_worker=args.ranks_per_worker,
    surrogate_factory=factory,
)
islands.propulate(debug=0)
propulator = islands.propulator

# Every rank of a worker started exactly the same epochs.
worker_epochs = propulator.worker_sub_comm.allgather(epochs_run)
assert len(set(worker_epochs)) == 1, f"ranks of one worker ran different epochs: {worker_epochs}"

root = propulator.worker_sub_comm.rank == 0
report = None
if root:
    island = propulator.island_comm
    population = propulator.population
    # What this worker evaluated (copies that migrated and came back have migration_steps > 0).
    mine = [
        ind
        for ind in population
        if ind.rank == island.rank and ind.island == propulator.island_idx and ind.migration_steps == 0
    ]
    problems = []
    for ind in population:
        if ind.status is Status.PRUNED:
            # It keeps the interim loss at which it stopped (maybe the last one: the surrogate cannot know).
            if not (0 < ind.steps <= EPOCHS and math.isclose(ind.loss, curve(ind["x"], ind.steps - 1))):
                problems.append(f"pruned {ind.params()} loss {ind.loss} steps {ind.steps}")
        elif ind.status is Status.COMPLETED:
            if not (ind.steps == EPOCHS and math.isclose(ind.loss, curve(ind["x"], EPOCHS - 1))):
                problems.append(f"completed {ind.params()} loss {ind.loss} steps {ind.steps}")
    # The surrogates of an island's workers learned the same runs, so they agree on the baseline.
    baseline = getattr(propulator.surrogate, "baseline", None)
    completed = [ind for ind in population if ind.status is Status.COMPLETED]
    best = min(completed, key=lambda ind: ind.loss, default=None)
    expected_baseline = [] if best is None else [curve(best["x"], k) for k in range(EPOCHS)]
    report = {
        "island": propulator.island_idx,
        "uids": sorted(ind.uid for ind in population),
        "evaluated_here": len(mine),
        "epochs_here": sum(ind.steps for ind in mine),
        "epochs_run": epochs_run,
        "status": {s.name: sum(ind.status is s for ind in mine) for s in Status},
        "problems": problems,
        "baseline": None if baseline is None else [round(v, 12) for v in baseline],
        "expected_baseline": [round(v, 12) for v in expected_baseline],
    }
reports = world.gather(report, root=0)
if world.rank == 0:
    roots = [r for r in reports if r is not None]
    islands_seen = {}
    for r in roots:
        islands_seen.setdefault(r["island"], []).append(r)
    result = {
        "workers": len(roots),
        "evaluations": sum(r["evaluated_here"] for r in roots),
        "status": {s.name: sum(r["status"][s.name] for r in roots) for s in Status},
        "problems": [p for r in roots for p in r["problems"]],
        "islands_consistent": all(
            len({json.dumps(r["uids"]) for r in rs}) == 1 for rs in islands_seen.values()
        ),
        "baselines_consistent": all(
            len({json.dumps(r["baseline"]) for r in rs}) == 1 for rs in islands_seen.values()
        ),
        "baseline_is_best_curve": all(
            r["baseline"] == r["expected_baseline"] for r in roots if args.surrogate == "static"
        ),
        "epochs_counted": all(r["epochs_here"] == r["epochs_run"] for r in roots),
    }
    print("RESULT " + json.dumps(result), flush=True)
