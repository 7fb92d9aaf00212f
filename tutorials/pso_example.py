"""Minimize a benchmark function with an asynchronous particle swarm.

Each worker owns one particle. Until the island holds one individual per worker, workers place their
particle at a random position with a small random velocity; afterwards every breeding moves the worker's
particle once, pulled towards its own best position and the best position any worker has reported so far.
Nobody waits for a swarm-wide iteration: a particle always uses the newest results that have arrived.

Choose the update rule with ``--variant``:

- ``Basic``: inertia weight ``--inertia`` with coefficients ``--cognitive`` and ``--social``;
- ``VelocityClamping``: as Basic, with speeds capped at ``--clamping-factor`` times each range;
- ``Constriction``: Clerc and Kennedy's constriction coefficient instead of an inertia weight;
- ``Canonical``: constriction plus a speed cap of one range per dimension.

Constriction needs ``cognitive + social > 4``; unless you give them, both default to 2.05 for the last two
variants. With ``--num-islands`` > 1 the swarm is split into islands that exchange particles. Run it with::

    mpiexec -n 4 python tutorials/pso_example.py --function rosenbrock --generations 200 --num-islands 1

The log goes to ``<checkpoint>/pso_example.log``; the best individuals are logged at the end, and the
first rank prints the run's best loss and parameters.
"""

import pathlib
import random

from mpi4py import MPI

from propulate import Islands
from propulate.propagators import Conditional
from propulate.propagators.pso import (
    BasicPSO,
    CanonicalPSO,
    ConstrictionPSO,
    InitUniformPSO,
    VelocityClampingPSO,
)
from propulate.utils import set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space, parse_arguments

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    config, hp_set = parse_arguments(
        comm,
        groups=("function", "pso", "islands"),
        checkpoint=f"./checkpoints/{pathlib.Path(__file__).stem}",
        description=__doc__.splitlines()[0],
    )
    pathlib.Path(config.checkpoint).mkdir(parents=True, exist_ok=True)
    set_logger_config(
        level=config.logging_level,
        log_file=f"{config.checkpoint}/{pathlib.Path(__file__).stem}.log",
    )

    loss_fn, limits = get_function_search_space(config.function)
    rng = random.Random(config.seed + comm.rank)  # One stream per rank, for distinct particles.

    # The rank given here is replaced by the worker's rank in its island when the run starts.
    if config.variant in ("Constriction", "Canonical"):
        cognitive = config.cognitive if hp_set["cognitive"] else 2.05
        social = config.social if hp_set["social"] else 2.05
        variant = ConstrictionPSO if config.variant == "Constriction" else CanonicalPSO
        pso = variant(cognitive, social, comm.rank, limits, rng)
    elif config.variant == "VelocityClamping":
        pso = VelocityClampingPSO(
            config.inertia, config.cognitive, config.social, comm.rank, limits, rng, config.clamping_factor
        )
    else:
        pso = BasicPSO(config.inertia, config.cognitive, config.social, comm.rank, limits, rng)

    # One particle per worker of an island: initialize until each worker has reported once, then move.
    workers_per_island = max(1, comm.size // config.num_islands)
    propagator = Conditional(workers_per_island, pso, InitUniformPSO(limits, comm.rank, rng=rng))

    islands = Islands(
        loss_fn,
        propagator,
        rng,
        generations=config.generations,
        num_islands=config.num_islands,
        migration_probability=config.migration_probability,
        pollination=config.pollination,
        checkpoint_path=config.checkpoint,
    )
    islands.propulate(logging_interval=config.logging_interval, debug=config.verbosity)
    islands.summarize(top_n=config.top_n, debug=config.verbosity)
    if comm.rank == 0:  # Every rank holds the run's result; the first prints it.
        print(f"Best loss {islands.best_loss:.6g} with {islands.best_params}")
