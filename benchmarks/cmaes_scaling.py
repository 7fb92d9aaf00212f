"""Does asynchronous CMA-ES scale with the workers? Best loss at a fixed budget against synchronous `cmaes`.

For each number of workers ``W``, function (10-D sphere, ellipsoid of condition 1e6, Rosenbrock) and seed,
an island of ``W`` workers runs ``CMAPropagator`` for ``--evaluations`` evaluations in all, and CyberAgent's
``cmaes.CMA`` runs synchronously (ask ``lambda``, tell ``lambda``) with ``lambda = max(10, W)`` on the same
budget, from a uniform random mean and ``sigma = 0.3`` of the range, as the propagator starts. The script
prints a Markdown table of the median best loss of each, their ratio (ours / ``cmaes``; the goal is below
10), the median number of evaluations until the first loss below ``TARGET`` (1e-8; "never" when more than
half the runs never got there) and the median number of distribution updates per worker
(``CMAParameter.generation``).

Two ways to run the island:

- simulated (default): :mod:`island_sim` drives one real propagator object per worker in simulated time,
  evaluation times drawn from ``--time-model`` (default lognormal, median 1, log-standard deviation
  ``--spread`` 0.5), results delivered to each other worker a time uniform in [0, ``--lag``] after they end
  (default 0: at once), each worker breeding right after its own result::

      python benchmarks/cmaes_scaling.py --workers 1 4 16 64 --seeds 5

- real MPI (``--mpi``): one island of all ranks runs ``propulate.Propulator``, ``W`` = the number of ranks;
  the loss costs nothing unless ``--sleep`` gives the median seconds of a (lognormal) sleep::

      mpiexec -n 4 python benchmarks/cmaes_scaling.py --mpi --seeds 5
      mpiexec -n 8 python benchmarks/cmaes_scaling.py --mpi --seeds 5

``--module FILE`` takes ``CMAPropagator`` and the adapters from another version of the module, e.g.
``git show REV:propulate/propagators/cmaes.py > /tmp/old.py``, to compare before and after. ``--json``
prints one JSON line per run as well.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np

N_DIMS = 10
#: The loss whose first reach is counted (evaluations in the order they ended).
TARGET = 1e-8


def sphere(x: np.ndarray) -> float:
    return float(np.sum(x**2))


def ellipsoid(x: np.ndarray) -> float:
    """Condition number 1e6: sum_i 10^(6 i / (n - 1)) x_i^2."""
    return float(np.sum(10.0 ** (6.0 * np.arange(x.size) / (x.size - 1)) * x**2))


def rosenbrock(x: np.ndarray) -> float:
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


#: name -> (function of a position, half-width of the box around 0)
FUNCTIONS: dict[str, tuple[Callable[[np.ndarray], float], float]] = {
    "sphere": (sphere, 5.12),
    "ellipsoid": (ellipsoid, 5.12),
    "rosenbrock": (rosenbrock, 2.048),
}


def load_module(path: str | None) -> ModuleType:
    """The module of ``CMAPropagator``: the library's, or another version of the file at ``path``."""
    if path is None:
        from propulate.propagators import cmaes

        return cmaes
    # A sibling of the real module, so that its relative imports resolve.
    spec = importlib.util.spec_from_file_location("propulate.propagators._cmaes_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def limits_of(bound: float) -> dict[str, tuple[float, float]]:
    return {f"x{i}": (-bound, bound) for i in range(N_DIMS)}


def to_target(losses: list[float]) -> float:
    """Evaluations, in the order they ended, until the first loss below ``TARGET``; ``inf`` if none."""
    return next((i + 1.0 for i, loss in enumerate(losses) if loss < TARGET), math.inf)


def reference(function: str, workers: int, evaluations: int, seed: int) -> tuple[float, float]:
    """Synchronous ``cmaes.CMA`` with ``lambda = max(10, workers)``: best loss and evaluations to target."""
    import cmaes

    f, bound = FUNCTIONS[function]
    rng = np.random.default_rng(seed)
    optimizer = cmaes.CMA(
        mean=rng.uniform(-bound, bound, N_DIMS),
        sigma=0.3 * 2 * bound,
        bounds=np.array([[-bound, bound]] * N_DIMS),
        seed=seed,
        population_size=max(10, workers),
    )
    losses: list[float] = []
    while len(losses) + optimizer.population_size <= evaluations:
        told = []
        for _ in range(optimizer.population_size):
            x = optimizer.ask()
            told.append((x, f(x)))
        losses += [value for _, value in told]
        optimizer.tell(told)
    return min(losses), to_target(losses)


def simulated(module: ModuleType, function: str, workers: int, args: argparse.Namespace, seed: int) -> dict:
    from island_sim import simulate

    f, bound = FUNCTIONS[function]
    adapter = module.ActiveCMA if args.adapter == "active" else module.BasicCMA
    propagators = [
        module.CMAPropagator(adapter(), limits_of(bound), rng=random.Random(1000 * seed + rank))
        for rank in range(workers)
    ]
    start = time.perf_counter()
    outcome = simulate(
        propagators, f, args.evaluations, np.random.default_rng(seed), args.time_model, args.spread, args.lag
    )
    return {
        "best": outcome.best,
        "to_target": to_target(outcome.losses),
        "updates": [p.par.generation for p in propagators],
        "lambda": propagators[0].par.lambda_,
        "seconds": time.perf_counter() - start,
    }


def real(module: ModuleType, function: str, args: argparse.Namespace, seed: int) -> dict | None:
    """One run of the real loop on one island of all ranks; the result on rank 0, ``None`` elsewhere."""
    from mpi4py import MPI

    from propulate import Propulator

    world = MPI.COMM_WORLD
    f, bound = FUNCTIONS[function]
    limits = limits_of(bound)
    adapter = module.ActiveCMA if args.adapter == "active" else module.BasicCMA
    rng = random.Random(1000 * seed + world.rank)
    sleep_rng = np.random.default_rng([seed, world.rank])
    propagator = module.CMAPropagator(adapter(), limits, rng=rng)

    def loss(params: dict[str, float]) -> float:
        if args.sleep > 0:
            time.sleep(args.sleep * sleep_rng.lognormal(0.0, args.spread))
        return f(np.array([params[name] for name in limits]))

    directory = world.bcast(tempfile.mkdtemp(prefix="cmaes-scaling-") if world.rank == 0 else None)
    propulator = Propulator(
        loss,
        propagator,
        rng=rng,
        island_comm=world,
        generations=args.evaluations // world.size,
        checkpoint_path=directory,
        resume=False,
    )
    start = time.perf_counter()
    propulator.propulate(debug=0)
    seconds = world.allreduce(time.perf_counter() - start, op=MPI.MAX)
    population = propulator.population
    best = world.allreduce(min(ind.loss for ind in population), op=MPI.MIN)
    ended = to_target([ind.loss for ind in sorted(population, key=lambda ind: ind.evaltime)])
    updates = world.gather(propagator.par.generation)
    world.barrier()
    if world.rank != 0:
        return None
    shutil.rmtree(directory, ignore_errors=True)
    return {
        "best": best,
        "to_target": ended,
        "updates": updates,
        "lambda": propagator.par.lambda_,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--functions", nargs="+", choices=list(FUNCTIONS), default=list(FUNCTIONS))
    parser.add_argument("--evaluations", type=int, default=6000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--adapter", choices=["active", "basic"], default="active")
    parser.add_argument("--time-model", choices=["lognormal", "uniform", "constant"], default="lognormal")
    parser.add_argument("--spread", type=float, default=0.5)
    parser.add_argument("--lag", type=float, default=0.0)
    parser.add_argument("--module", help="take CMAPropagator from this file instead of the library")
    parser.add_argument("--mpi", action="store_true", help="run the real loop on the ranks of COMM_WORLD")
    parser.add_argument("--sleep", type=float, default=0.0, help="--mpi: median seconds per evaluation")
    parser.add_argument("--json", action="store_true", help="also print one JSON line per run")
    args = parser.parse_args()
    module = load_module(args.module)
    sys.path.insert(0, str(Path(__file__).parent))

    rank = 0
    if args.mpi:
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.rank
        worker_counts = [MPI.COMM_WORLD.size]
    else:
        worker_counts = args.workers
    rows = []
    for function in args.functions:
        for workers in worker_counts:
            ours, theirs, updates, lambdas, seconds, ours_n, theirs_n = [], [], [], [], [], [], []
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                if args.mpi:
                    result = real(module, function, args, seed)
                else:
                    result = simulated(module, function, workers, args, seed)
                if rank != 0 or result is None:
                    continue
                result["reference"], result["reference_to_target"] = reference(
                    function, workers, args.evaluations, seed
                )
                ours.append(result["best"])
                theirs.append(result["reference"])
                ours_n.append(result["to_target"])
                theirs_n.append(result["reference_to_target"])
                updates.append(statistics.median(result["updates"]))
                lambdas.append(result["lambda"])
                seconds.append(result["seconds"])
                if args.json:
                    line = {"function": function, "workers": workers, "seed": seed, **result}
                    print(json.dumps(line), flush=True)
            if rank == 0:
                median_ours, median_theirs = statistics.median(ours), statistics.median(theirs)
                ratio = median_ours / median_theirs if median_theirs > 0 else math.inf
                reference_updates = args.evaluations // max(10, workers)
                rows.append(
                    f"| {function} | {workers} | {lambdas[0]} | {median_ours:.2g} | {median_theirs:.2g} | "
                    f"{ratio:.2g} | {_count(statistics.median(ours_n))} | "
                    f"{_count(statistics.median(theirs_n))} | {statistics.median(updates):.0f} | "
                    f"{reference_updates} | {statistics.median(seconds):.1f} |"
                )
                print(rows[-1], flush=True)
    if rank == 0:
        mode = (
            "real MPI loop"
            if args.mpi
            else f"simulated ({args.time_model}, spread {args.spread}, lag {args.lag})"
        )
        print(
            f"\n{mode}, {args.adapter} CMA-ES, {N_DIMS}-D, {args.evaluations} evaluations, median of "
            f"{args.seeds} seeds from {args.first_seed}\n"
        )
        print(
            f"| function | W | λ | ours | cmaes | ratio | ours to {TARGET:g} | cmaes to {TARGET:g} | "
            "updates per worker | cmaes updates | s per run |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        print("\n".join(rows))


def _count(evaluations: float) -> str:
    return "never" if math.isinf(evaluations) else f"{evaluations:.0f}"


if __name__ == "__main__":
    main()
