"""Run a multi-objective search (NSGA-II on ZDT1 or a mixed space) and check its invariants collectively.

Checks, on every rank: exact evaluation counts, the same population (uids, losses) on every worker of an
island, the island's Pareto front from ``summarize()`` the same on every worker of the island and equal to
the front computed from its population, the run's front (``pareto_front``) the same on every rank and equal
to the front of the union of the islands' fronts, losses stored as returned (maximized objectives negated),
and, from the checkpoint read back, the ``values_<i>`` columns of every evaluation. Prints ``RESULT {json}``
on rank 0.

``--fail-every K`` makes every K-th evaluation of a worker raise; ``--nan-every K`` return NaN in one
objective; ``--wrong-count`` makes every evaluation return three values for two objectives.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys

import numpy as np
from mpi4py import MPI

from propulate import Islands
from propulate.checkpoint import CheckpointError
from propulate.errors import RunFailedError
from propulate.objectives import hypervolume, loss_vector, pareto_front
from propulate.propagators import NSGA2
from propulate.report import load_dataframe

world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--generations", type=int, default=30)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--migration-probability", type=float, default=0.9)
parser.add_argument("--pop-size", type=int, default=8)
parser.add_argument("--space", choices=["zdt1", "mixed"], default="zdt1")
parser.add_argument("--fail-every", type=int, default=0)
parser.add_argument("--nan-every", type=int, default=0)
parser.add_argument("--wrong-count", action="store_true")
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--objectives", default="", help="JSON: the objectives argument instead of the space's")
args = parser.parse_args()

calls = 0

if args.space == "zdt1":
    limits = {f"x{i}": (0.0, 1.0) for i in range(6)}
    objectives: object = 2

    def objective_values(params):
        x = np.array([params[f"x{i}"] for i in range(6)])
        g = 1.0 + 9.0 * x[1:].mean()
        return [float(x[0]), float(g * (1.0 - math.sqrt(x[0] / g)))]

else:
    # Named objectives, one maximized, returned as a mapping with a metric besides.
    limits = {"width": (1, 64), "lr": (1e-4, 1e-1), "act": ("relu", "tanh", "gelu")}
    objectives = {"error": "minimize", "throughput": "maximize"}

    def objective_values(params):
        error = (
            (math.log10(params["lr"]) + 2.5) ** 2 + 1.0 / params["width"] + (params["act"] == "tanh") * 0.1
        )
        return {"error": error, "throughput": 100.0 / params["width"], "memory": float(params["width"])}


def loss_fn(params, comm=None):
    global calls
    calls += 1
    if args.fail_every and calls % args.fail_every == 0:
        raise ValueError("broken evaluation")
    values = objective_values(params)
    if args.wrong_count:
        return [*values, 0.0]
    if args.nan_every and calls % args.nan_every == 0:
        values = list(values) if not isinstance(values, dict) else values
        if isinstance(values, dict):
            values["error"] = math.nan
        else:
            values[1] = math.nan
    return values


if args.objectives:
    objectives = json.loads(args.objectives)
rng = random.Random(1000 * args.seed + world.rank)
try:
    islands = Islands(
        loss_fn,
        NSGA2(limits, pop_size=args.pop_size, rng=rng),
        rng,
        generations=args.generations,
        num_islands=args.num_islands,
        migration_probability=args.migration_probability if args.num_islands > 1 else 0.0,
        pollination=args.pollination,
        checkpoint_path=args.checkpoint,
        ranks_per_worker=args.ranks_per_worker,
        objectives=objectives,
    )
except CheckpointError as err:  # raised on every rank
    if world.rank == 0:
        print("RESULT " + json.dumps({"checkpoint_error": str(err)}), flush=True)
    sys.exit(0)
propulator = islands.propulator
failed_run = ""
try:
    islands.propulate(debug=0)
except RunFailedError as err:
    failed_run = str(err)
if failed_run:
    # Every rank raised; the evaluations are in the checkpoint.
    world.Barrier()
    if world.rank == 0:
        frame = load_dataframe(args.checkpoint)
        reasons = sorted(set(frame.get("system_attrs_fail_reason", [])))
        print(
            "RESULT "
            + json.dumps(
                {"run_failed": failed_run, "states": sorted(set(frame["state"])), "reasons": reasons}
            )
        )
    sys.exit(0)

layout = islands.layout
problems: list[str] = []
summary = islands.summarize(debug=0)
front = islands.pareto_front
key = [(ind.uid, loss_vector(ind)) for ind in front]
if not all(other == key for other in world.allgather(key)):
    problems.append("the run's Pareto front differs between ranks")
sub_keys = world.allgather([[(ind.uid, loss_vector(ind)) for ind in worker] for worker in summary])
if not all(other == sub_keys[0] for other in sub_keys):
    problems.append("summarize() differs between ranks")
mine = propulator.population
# repr: NaN (a failed evaluation's loss) compares unequal to itself.
population_key = sorted((ind.uid, repr(loss_vector(ind)), ind.active) for ind in mine)
if layout.island_comm != MPI.COMM_NULL:
    same = layout.island_comm.allgather(population_key)
    if not all(other == population_key for other in same):
        problems.append(f"island {layout.island_index}: populations differ between its workers")
    island_front = sorted((ind.uid, loss_vector(ind)) for ind in pareto_front(mine))
    worker = layout.propulate_comm.rank
    if sorted((ind.uid, loss_vector(ind)) for ind in summary[worker]) != island_front:
        problems.append(f"worker {worker}: summarize() is not its island's front")
    fronts = layout.propulate_comm.allgather(pareto_front(mine))
    union = sorted(loss_vector(ind) for ind in pareto_front([ind for f in fronts for ind in f]))
    if sorted(loss_vector(ind) for ind in front) != union:
        problems.append("the run's front is not the front of the islands' fronts")
    completed = [ind for ind in mine if ind.status.name == "COMPLETED"]
    if any(ind.losses is None or len(ind.losses) != 2 for ind in completed):
        problems.append("a completed individual without two losses")
    if any(ind.loss != ind.losses[0] for ind in completed if ind.losses):
        problems.append("loss is not the first of the losses")
    if args.space == "mixed" and any(ind.losses[1] > 0 for ind in completed if ind.losses):
        problems.append("a maximized objective was not negated")
    if args.space == "mixed" and any("memory" not in ind.metrics for ind in completed):
        problems.append("the metric returned besides the objectives is missing")
world.Barrier()
result = None
if world.rank == 0:
    frame = load_dataframe(args.checkpoint)
    done = frame[frame["state"] == "COMPLETE"]
    if "value" in frame.columns or "values_1" not in frame.columns:
        problems.append(f"columns {list(frame.columns)[:6]}")
    if args.space == "mixed" and not (done["values_1"] > 0).all():
        problems.append("values_1 of a maximized objective is not as returned")
    points = np.array([loss_vector(ind) for ind in front])
    result = {
        "evaluations": len(frame),
        "states": {state: int(n) for state, n in frame["state"].value_counts().items()},
        "front": len(front),
        "hypervolume": hypervolume(points, (1.1, 10.0)) if args.space == "zdt1" else None,
        "problems": problems,
    }
problems_all = world.gather(problems, root=0)
if world.rank == 0:
    result["problems"] = sorted({p for ps in problems_all for p in ps})
    print("RESULT " + json.dumps(result), flush=True)
