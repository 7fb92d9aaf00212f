"""Run Propulator with ParallelNelderMead on sphere or Rosenbrock and check it follows the serial method.

All ranks form one island. The start is not the optimum: (3, -4, 3, -4, ...) for sphere, the classic
(-1.2, 1, -1.2, 1, ...) for Rosenbrock. After the run, collectively: every individual lies inside the limits,
every worker's replica of the serial Nelder–Mead method is the same, and rank 0 checks that this state is one
the serial method reaches when it runs alone on the same function for as many evaluations (the trajectory does
not depend on the number of workers, their timing, or a resume). Rank 0 prints ``RESULT {json}`` with the best
loss, the number of individuals, how many distinct points they are, and how many evaluations of the serial
method the replica is at.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile

from mpi4py import MPI

from propulate import Propulator
from propulate.individual import Status
from propulate.propagators.nm import ParallelNelderMead, SimplexState
from propulate.utils.benchmark_functions import get_function_search_space

parser = argparse.ArgumentParser()
parser.add_argument("--function", choices=("sphere", "rosenbrock"), default="sphere")
parser.add_argument("--dim", type=int, default=2)
parser.add_argument("--generations", type=int, default=100)
parser.add_argument("--scale", type=float, default=1.0, help="initial edge length / range")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--checkpoint", default="", help="directory; a fresh temporary one if not given")
args = parser.parse_args()

# Both functions are defined for any number of parameters.
loss_fn, limits = get_function_search_space(args.function)
bounds = next(iter(limits.values()))
limits = {f"x{i}": bounds for i in range(args.dim)}
pattern = {"sphere": (3.0, -4.0), "rosenbrock": (-1.2, 1.0)}[args.function]
start = [pattern[i % 2] for i in range(args.dim)]

comm = MPI.COMM_WORLD
checkpoint = args.checkpoint or comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
rng = random.Random(1000 * args.seed + comm.rank)
propagator = ParallelNelderMead(limits, rng, start=start, scale=args.scale)
propulator = Propulator(
    loss_fn, propagator, rng=rng, generations=args.generations, checkpoint_path=checkpoint
)
propulator.propulate(logging_interval=10**6, debug=0)

population = propulator.population  # in arrival order, as the loop passes it to the propagator
low, high = bounds
assert all(low <= value <= high for ind in population for value in ind.values())
state = propagator.replica([ind for ind in population if ind.active and ind.status is Status.COMPLETED])
assert state is not None
plain = json.dumps(state.to_plain())
replicas = comm.allgather(plain)
assert len(set(replicas)) == 1, "the workers' replicas of the serial method differ"


def serial_state(steps: int) -> SimplexState:
    """Run the serial method alone for ``steps`` evaluations of the loss and return its state."""
    serial = ParallelNelderMead(limits, random.Random(0), start=start, scale=args.scale)
    current = serial.replica([])  # the initial state of the serial method
    assert current is not None
    for _ in range(steps):
        current = serial.tell(current, loss_fn(dict(zip(limits, current.point.tolist(), strict=True))))
    return current


if comm.rank == 0:
    assert json.dumps(serial_state(state.step).to_plain()) == plain, "not a state of the serial method"
    result = {
        "function": args.function,
        "dim": args.dim,
        "best": min(ind.loss for ind in population),
        "n": len(population),
        "distinct": len({ind.position.tobytes() for ind in population}),
        "serial_steps": state.step,
    }
    print("RESULT " + json.dumps(result))
