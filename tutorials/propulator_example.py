"""Minimize a benchmark function with a single island of asynchronous workers.

Every MPI rank is one worker of the same island: it breeds an individual from the shared population, evaluates
it and tells all other workers the result, without waiting for anyone. Choose the function with ``--function``
(sphere by default) and see ``--help`` for the other options. Run it with::

    mpiexec -n 4 python tutorials/propulator_example.py --generations 20 --function rosenbrock

Checkpoints and the log, ``propulator_example.log``, go to ``--checkpoint``, by default
``./checkpoints/propulator_example`` (each tutorial has its own folder, so none resumes another's run); the
best individuals are logged at the end, and the first rank prints the run's best loss and parameters.
"""

import pathlib
import random

from mpi4py import MPI

from propulate import Propulator
from propulate.utils import get_default_propagator, set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space, parse_arguments

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    config, _ = parse_arguments(
        comm,
        groups=("function", "ga"),
        checkpoint=f"./checkpoints/{pathlib.Path(__file__).stem}",
        description=__doc__.splitlines()[0],
    )
    pathlib.Path(config.checkpoint).mkdir(parents=True, exist_ok=True)
    set_logger_config(
        level=config.logging_level,
        log_file=f"{config.checkpoint}/{pathlib.Path(__file__).stem}.log",
    )

    loss_fn, limits = get_function_search_space(config.function)
    rng = random.Random(config.seed + comm.rank)  # One stream per rank, for distinct offspring.

    # Random individuals until the population holds pop_size, then crossover and mutations of the best.
    propagator = get_default_propagator(
        pop_size=config.pop_size,
        limits=limits,
        crossover_prob=config.crossover_probability,
        mutation_prob=config.mutation_probability,
        random_init_prob=config.random_init_probability,
        rng=rng,
    )
    propulator = Propulator(
        loss_fn,
        propagator,
        rng=rng,
        island_comm=comm,  # All ranks form one island.
        generations=config.generations,  # Per worker: generations x ranks evaluations in total.
        checkpoint_path=config.checkpoint,
    )
    propulator.propulate(logging_interval=config.logging_interval, debug=config.verbosity)
    propulator.summarize(top_n=config.top_n, debug=config.verbosity)
    if comm.rank == 0:  # Every rank holds the run's result; the first prints it.
        print(f"Best loss {propulator.best_loss:.6g} with {propulator.best_params}")
