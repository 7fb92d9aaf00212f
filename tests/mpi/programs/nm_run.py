"""Run Propulator with ParallelNelderMead on one benchmark and print ``RESULT {json}`` with the best loss."""

from __future__ import annotations

import argparse
import json
import random
import tempfile

from mpi4py import MPI

from propulate import Propulator
from propulate.propagators.nm import ParallelNelderMead
from propulate.utils.benchmark_functions import get_function_search_space

parser = argparse.ArgumentParser()
parser.add_argument("--function", default="sphere", help="sphere, rosenbrock, sphere10 or rosenbrock10")
parser.add_argument("--generations", type=int, default=100)
args = parser.parse_args()


def sphere10(params):
    return sum(v * v for v in params.values())


def rosenbrock10(params):
    x = [params[f"x{i}"] for i in range(10)]
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(9))


if args.function == "sphere10":
    loss_fn, limits, start = sphere10, {f"x{i}": (-5.12, 5.12) for i in range(10)}, [3.0] * 10
elif args.function == "rosenbrock10":
    loss_fn, limits, start = rosenbrock10, {f"x{i}": (-2.048, 2.048) for i in range(10)}, [-1.2] * 10
else:
    loss_fn, limits = get_function_search_space(args.function)
    start = {"sphere": [3.0, -4.0], "rosenbrock": [-1.2, 1.0]}[args.function]

comm = MPI.COMM_WORLD
checkpoint = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
rng = random.Random(42 + comm.rank)
propulator = Propulator(
    loss_fn,
    ParallelNelderMead(limits, rng, start=start),
    rng=rng,
    generations=args.generations,
    checkpoint_path=checkpoint,
)
propulator.propulate(logging_interval=1000, debug=0)
best = min(ind.loss for ind in propulator.population)
bests = comm.allgather(best)
assert len(set(bests)) == 1, bests
if comm.rank == 0:
    print("RESULT " + json.dumps({"function": args.function, "best": best, "n": len(propulator.population)}))
