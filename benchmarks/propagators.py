"""Best loss of every propagator on the benchmark functions of the Propulate paper (ISC 2023).

For each propagator, each function (sphere, rosenbrock, step, quartic, rastrigin, griewank, schwefel,
bisphere, birastrigin, in the dimensions of ``get_function_search_space``) and each seed, one island of all
ranks runs ``--generations`` generations per worker; the best loss found is recorded. Rank 0 prints one JSON
line per run and, at the end, a Markdown table of the median and the range (min–max) over the seeds.

Usage (the table of the closing note of issue 5)::

    mpiexec -n 4 python benchmarks/propagators.py --generations 250 --seeds 5

``--propagators`` and ``--functions`` restrict the runs; ``--list`` prints the propagator names.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from propulate import Propulator
from propulate.propagators import Conditional, Propagator
from propulate.utils import get_default_propagator
from propulate.utils.benchmark_functions import get_function_search_space

FUNCTIONS = (
    "sphere",
    "rosenbrock",
    "step",
    "quartic",
    "rastrigin",
    "griewank",
    "schwefel",
    "bisphere",
    "birastrigin",
)

# Standard PSO coefficients: inertia 0.729 and c = 1.49445 (Clerc & Kennedy 2002, equivalent constriction
# form with phi = 4.1); velocity clamping to 0.6 of the range.
INERTIA, C_COGNITIVE, C_SOCIAL, PHI_HALF = 0.729, 1.49445, 1.49445, 2.05


def _pso(kind: str) -> Callable[[dict, int, random.Random, int], Propagator]:
    def build(limits: dict, rank: int, rng: random.Random, workers: int) -> Propagator:
        from propulate.propagators import pso

        init = pso.InitUniformPSO(limits, rank=rank, rng=rng)
        if kind == "Basic":
            move: Propagator = pso.BasicPSO(INERTIA, C_COGNITIVE, C_SOCIAL, rank, limits, rng)
        elif kind == "VelocityClamping":
            move = pso.VelocityClampingPSO(INERTIA, C_COGNITIVE, C_SOCIAL, rank, limits, rng, 0.6)
        elif kind == "Constriction":
            move = pso.ConstrictionPSO(PHI_HALF, PHI_HALF, rank, limits, rng)
        elif kind == "Canonical":
            move = pso.CanonicalPSO(PHI_HALF, PHI_HALF, rank, limits, rng)
        else:
            move = pso.StatelessPSO(INERTIA, C_COGNITIVE, C_SOCIAL, rank, limits, rng)
        return Conditional(workers, move, init)

    return build


def _cma(active: bool) -> Callable[[dict, int, random.Random, int], Propagator]:
    def build(limits: dict, rank: int, rng: random.Random, workers: int) -> Propagator:
        from propulate.propagators import cmaes

        adapter = cmaes.ActiveCMA() if active else cmaes.BasicCMA()
        return cmaes.CMAPropagator(adapter, limits, rng=rng)

    return build


def _nelder_mead(limits: dict, rank: int, rng: random.Random, workers: int) -> Propagator:
    from propulate.propagators import nm

    return nm.ParallelNelderMead(limits, rng)


def _genetic(limits: dict, rank: int, rng: random.Random, workers: int) -> Propagator:
    return get_default_propagator(2 * workers, limits, rng=rng)


PROPAGATORS: dict[str, Callable[[dict, int, random.Random, int], Propagator]] = {
    "ga-default": _genetic,
    "pso-basic": _pso("Basic"),
    "pso-velocity-clamping": _pso("VelocityClamping"),
    "pso-constriction": _pso("Constriction"),
    "pso-canonical": _pso("Canonical"),
    "pso-stateless": _pso("Stateless"),
    "cma-basic": _cma(active=False),
    "cma-active": _cma(active=True),
    "nelder-mead": _nelder_mead,
}


def run_one(name: str, function_name: str, seed: int, generations: int, comm: MPI.Comm) -> dict[str, Any]:
    """Run one optimization on all ranks; return the best loss (the same on every rank)."""
    function, limits = get_function_search_space(function_name)
    rng = random.Random(1000 * seed + comm.rank)
    propagator = PROPAGATORS[name](limits, comm.rank, rng, comm.size)
    directory = comm.bcast(tempfile.mkdtemp(prefix="propulate-propagators-") if comm.rank == 0 else None)
    propulator = Propulator(function, propagator, rng, generations=generations, checkpoint_path=directory)
    start = time.perf_counter()
    propulator.propulate(debug=0)
    elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    best = [ind.loss for worker in propulator.summarize(top_n=1, debug=0) for ind in worker]
    return {
        "propagator": name,
        "function": function_name,
        "seed": seed,
        "best": min(best),
        "seconds": elapsed,
    }


def table(results: list[dict[str, Any]], names: list[str], functions: list[str]) -> str:
    """Markdown table: median [min, max] of the best loss over the seeds."""
    lines = ["| propagator | " + " | ".join(functions) + " |", "| --- |" + " --- |" * len(functions)]
    for name in names:
        cells = []
        for function_name in functions:
            values = np.array(
                [r["best"] for r in results if r["propagator"] == name and r["function"] == function_name]
            )
            if values.size == 0:
                cells.append("n/a")
            else:
                cells.append(f"{np.median(values):.3g} [{values.min():.2g}, {values.max():.2g}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=250, help="generations per worker and run")
    parser.add_argument("--seeds", type=int, default=5, help="runs per propagator and function")
    parser.add_argument("--propagators", nargs="+", default=list(PROPAGATORS), choices=list(PROPAGATORS))
    parser.add_argument("--functions", nargs="+", default=list(FUNCTIONS), choices=list(FUNCTIONS))
    parser.add_argument("--list", action="store_true", help="print the propagator names and exit")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if args.list:
        if comm.rank == 0:
            print("\n".join(PROPAGATORS))
        return
    results = []
    for name in args.propagators:
        for function_name in args.functions:
            for seed in range(args.seeds):
                result = run_one(name, function_name, seed, args.generations, comm)
                results.append(result)
                if comm.rank == 0:
                    print(json.dumps(result), flush=True)
    if comm.rank == 0:
        setting = f"{args.seeds} seeds, {comm.size} ranks x {args.generations} generations"
        print(f"\nBest loss, median [min, max] over {setting}:\n")
        print(table(results, args.propagators, args.functions))


if __name__ == "__main__":
    main()
