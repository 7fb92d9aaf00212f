"""Minimize a benchmark function with asynchronous CMA-ES on a single island.

CMA-ES (covariance matrix adaptation evolution strategy) samples candidates from a multivariate normal
distribution and learns its mean, step size and covariance matrix from the best candidates, so that it
follows curved and badly scaled valleys. Here every MPI rank keeps a copy of the island's strategy: it
samples one candidate, evaluates it and shares the result with all others; every rank learns every result in
the order the evaluations ended, ``lambda`` results per update, so the copies stay the same and the island
makes about one update per ``lambda`` evaluations, as a serial CMA-ES does. ``--adapter basic`` learns
from the best half of each generation, ``--adapter active`` also from the worst ones, pushing the
distribution away from them.

CMA-ES needs float parameters only; the benchmark functions of ``propulate.utils.benchmark_functions`` all
have them. Run it with::

    mpiexec -n 4 python tutorials/cmaes_example.py --function rosenbrock --adapter active --generations 200

There is no ``--pop-size``: CMA-ES picks ``lambda = max(4 + floor(3 ln n), ceil(4 sqrt(W)))`` for ``n``
parameters and ``W`` workers. The log goes to ``<checkpoint>/cmaes_example.log``; the best individuals
are logged at the end, and the first rank prints the run's best loss and parameters.
"""

import pathlib
import random

from mpi4py import MPI

from propulate import Propulator
from propulate.propagators.cmaes import ActiveCMA, BasicCMA, CMAPropagator
from propulate.utils import set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space, parse_arguments

if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    config, _ = parse_arguments(
        comm,
        groups=("function", "cmaes"),
        checkpoint=f"./checkpoints/{pathlib.Path(__file__).stem}",
        description=__doc__.splitlines()[0],
    )
    pathlib.Path(config.checkpoint).mkdir(parents=True, exist_ok=True)
    set_logger_config(
        level=config.logging_level,
        log_file=f"{config.checkpoint}/{pathlib.Path(__file__).stem}.log",
    )

    loss_fn, limits = get_function_search_space(config.function)
    rng = random.Random(config.seed + comm.rank)  # One stream per rank: each rank samples its own candidates.

    adapter = ActiveCMA() if config.adapter == "active" else BasicCMA()
    propagator = CMAPropagator(adapter, limits, rng=rng)  # Offspring always stay inside the limits.
    propulator = Propulator(
        loss_fn,
        propagator,
        rng=rng,
        island_comm=comm,  # All ranks form one island and see every result.
        generations=config.generations,  # Per worker: generations x ranks evaluations in total.
        checkpoint_path=config.checkpoint,  # The strategy's state is checkpointed with the population.
    )
    propulator.propulate(logging_interval=config.logging_interval, debug=config.verbosity)
    propulator.summarize(top_n=config.top_n, debug=config.verbosity)
    if comm.rank == 0:  # Every rank holds the run's result; the first prints it.
        print(f"Best loss {propulator.best_loss:.6g} with {propulator.best_params}")
