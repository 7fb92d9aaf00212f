"""Evaluate each individual on several ranks at once (multi-rank workers).

Every worker is ``--ranks-per-worker`` consecutive ranks. All ranks of a worker receive the same parameters
and the worker's communicator; here each rank adds up the squares of its share of the coordinates of a
sphere function and the shares are summed over the worker, as a data-parallel training step would average its
gradients. The same pattern carries over to PyTorch DDP. Run it with::

    mpiexec -n 4 python tutorials/multi_rank_workers_example.py --generations 20 --ranks-per-worker 2

Checkpoints and the log, ``multi_rank_workers_example.log``, go to ``--checkpoint``, by default
``./checkpoints/multi_rank_workers_example``; the best individuals are logged at the end, and the first rank
prints the run's best loss and parameters.
"""

import pathlib
import random
from collections.abc import Mapping

import numpy as np
from mpi4py import MPI

from propulate import Islands
from propulate.propagators import SelectMax, SelectMin
from propulate.utils import get_default_propagator, set_logger_config
from propulate.utils.benchmark_functions import parse_arguments

DIMENSIONS = 8


def parallel_sphere(params: Mapping[str, float], comm: MPI.Comm = MPI.COMM_SELF) -> float:
    """Return the sphere function's value, sum of squares of all coordinates, computed by the whole worker.

    Rank ``r`` of the worker's ``comm`` squares the coordinates ``r, r + comm.size, ...``; the partial sums
    are reduced over ``comm``, so every rank returns the same loss.
    """
    x = np.fromiter(params.values(), dtype=float)
    partial = float(np.sum(x[comm.rank :: comm.size] ** 2))
    return comm.allreduce(partial, op=MPI.SUM)


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    config, _ = parse_arguments(
        comm,
        groups=("ga", "islands", "migrants", "workers"),
        checkpoint=f"./checkpoints/{pathlib.Path(__file__).stem}",
        description=__doc__.splitlines()[0],
    )
    pathlib.Path(config.checkpoint).mkdir(parents=True, exist_ok=True)
    set_logger_config(
        level=config.logging_level,
        log_file=f"{config.checkpoint}/{pathlib.Path(__file__).stem}.log",
    )

    limits = {f"x{i}": (-5.12, 5.12) for i in range(DIMENSIONS)}
    rng = random.Random(config.seed + comm.rank)
    propagator = get_default_propagator(
        pop_size=config.pop_size,
        limits=limits,
        crossover_prob=config.crossover_probability,
        mutation_prob=config.mutation_probability,
        random_init_prob=config.random_init_probability,
        rng=rng,
    )

    migration_topology = np.full((config.num_islands, config.num_islands), config.num_migrants, dtype=int)
    np.fill_diagonal(migration_topology, 0)

    islands = Islands(
        parallel_sphere,
        propagator,
        rng,
        generations=config.generations,
        num_islands=config.num_islands,
        migration_topology=migration_topology,
        migration_probability=config.migration_probability,
        emigration_propagator=SelectMin,
        immigration_propagator=SelectMax,
        pollination=config.pollination,
        checkpoint_path=config.checkpoint,
        ranks_per_worker=config.ranks_per_worker,  # Ranks that evaluate one individual together.
    )
    islands.propulate(logging_interval=config.logging_interval, debug=config.verbosity)
    islands.summarize(top_n=config.top_n, debug=config.verbosity)
    if comm.rank == 0:  # Every rank holds the run's result; the first prints it.
        print(f"Best loss {islands.best_loss:.6g} with {islands.best_params}")
