"""The run's progress line and per-rank log files: a short island run with debug=1.

Logs go to ``<dir>/rank-{rank}.log`` on every rank and to standard output on the first rank only.
"""

from __future__ import annotations

import argparse
import random

from mpi4py import MPI

from propulate import Islands
from propulate.utils import get_default_propagator, set_logger_config
from propulate.utils.benchmark_functions import get_function_search_space

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--logs", required=True)
parser.add_argument("--generations", type=int, default=30)
parser.add_argument("--num-islands", type=int, default=2)
args = parser.parse_args()

set_logger_config(
    log_file=f"{args.logs}/rank-{{rank}}.log", log_to_stdout="first", log_rank=True, colors=False
)
function, limits = get_function_search_space("sphere")
rng = random.Random(7 + MPI.COMM_WORLD.rank)
islands = Islands(
    function,
    get_default_propagator(4, limits, rng=rng),
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=0.5,
    checkpoint_path=args.checkpoint,
)
islands.propulate(debug=1)
