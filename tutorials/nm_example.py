"""Minimize a benchmark function with the asynchronous parallel Nelder–Mead simplex search.

All MPI ranks form one island and share one population. Every worker follows the same serial Nelder–Mead
method through the losses of the population; worker 0 evaluates the point the method needs next and the other
workers the points it will likely need after that (the next reflection, a contraction, ...), so the workers
try different points at the same time. Run it with::

    mpiexec -n 4 python tutorials/nm_example.py --generations 200 --function rosenbrock

The best individuals are logged at the end, and the first rank prints the run's best loss and parameters.
"""

import pathlib
import random

from mpi4py import MPI

from propulate import Propulator
from propulate.propagators.nm import ParallelNelderMead
from propulate.utils import set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space, parse_arguments

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    config, _ = parse_arguments(
        comm,
        groups=("function",),
        checkpoint=f"./checkpoints/{pathlib.Path(__file__).stem}",
        description=__doc__.splitlines()[0],
    )
    pathlib.Path(config.checkpoint).mkdir(parents=True, exist_ok=True)
    set_logger_config(
        level=config.logging_level, log_file=f"{config.checkpoint}/{pathlib.Path(__file__).stem}.log"
    )

    loss_fn, limits = get_function_search_space(config.function)
    rng = random.Random(config.seed + comm.rank)
    # Without start=..., the first point worker 0 draws is the start of the simplex.
    propagator = ParallelNelderMead(limits, rng)
    propulator = Propulator(
        loss_fn,
        propagator,
        rng=rng,
        island_comm=comm,
        generations=config.generations,
        checkpoint_path=config.checkpoint,
    )
    propulator.propulate(logging_interval=config.logging_interval, debug=config.verbosity)
    propulator.summarize(top_n=config.top_n, debug=config.verbosity)
    if comm.rank == 0:  # Every rank holds the run's result; the first prints it.
        print(f"Best loss {propulator.best_loss:.6g} with {propulator.best_params}")
