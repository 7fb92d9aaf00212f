"""Minimize a benchmark function with several islands that exchange individuals.

The ranks are split into ``--num-islands`` islands, each evolving its own population asynchronously. With
probability ``--migration-probability`` per round, an island sends its best ``--num-migrants`` individuals to
every other island: moved (migration) by default, copied with ``--pollination``. Run it with::

    mpiexec -n 4 python tutorials/islands_example.py --generations 20 --num-islands 2 --checkpoint ./run

The log goes to ``<checkpoint>/islands_example.log``; the best individuals of each island are logged at
the end, and the first rank prints the run's best loss and parameters.
"""

import pathlib
import random

import numpy as np
from mpi4py import MPI

from propulate import Islands
from propulate.propagators import SelectMax, SelectMin
from propulate.utils import get_default_propagator, set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space, parse_arguments

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    config, _ = parse_arguments(
        comm,
        groups=("function", "ga", "islands", "migrants"),
        checkpoint=f"./checkpoints/{pathlib.Path(__file__).stem}",
        description=__doc__.splitlines()[0],
    )
    pathlib.Path(config.checkpoint).mkdir(parents=True, exist_ok=True)
    set_logger_config(
        level=config.logging_level,
        log_file=f"{config.checkpoint}/{pathlib.Path(__file__).stem}.log",
    )

    loss_fn, limits = get_function_search_space(config.function)
    rng = random.Random(config.seed + comm.rank)
    propagator = get_default_propagator(
        pop_size=config.pop_size,
        limits=limits,
        crossover_prob=config.crossover_probability,
        mutation_prob=config.mutation_probability,
        random_init_prob=config.random_init_probability,
        rng=rng,
    )

    # Entry (i, j): how many individuals island i sends to island j per migration event.
    migration_topology = np.full((config.num_islands, config.num_islands), config.num_migrants, dtype=int)
    np.fill_diagonal(migration_topology, 0)

    islands = Islands(
        loss_fn,
        propagator,
        rng,
        generations=config.generations,
        num_islands=config.num_islands,
        migration_topology=migration_topology,
        migration_probability=config.migration_probability,
        emigration_propagator=SelectMin,  # Send the best ...
        immigration_propagator=SelectMax,  # ... and, when pollinating, replace the worst.
        pollination=config.pollination,
        checkpoint_path=config.checkpoint,
    )
    islands.propulate(logging_interval=config.logging_interval, debug=config.verbosity)
    islands.summarize(top_n=config.top_n, debug=config.verbosity)
    if comm.rank == 0:  # Every rank holds the run's result; the first prints it.
        print(f"Best loss {islands.best_loss:.6g} with {islands.best_params}")
