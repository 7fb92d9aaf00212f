"""What a new user sees in the log (issue 21): resumes, counts by status, an all-failed run, job-wide news.

Usage: ``first_hour.py MODE CHECKPOINT GENERATIONS [NUM_ISLANDS]`` with MODE one of

- ``ok``: a cheap loss that never fails;
- ``fail``: a loss that always raises (``on_failure="continue"``); every rank prints ``RAISED <type>``;
- ``signal``: every rank sends itself SIGINT in its second evaluation, as ``mpiexec`` forwards a Ctrl-C;
- ``lag``: rank 0's evaluations take a second, the others' nothing, and a progress line follows each
  generation (``PROPULATE_PROGRESS_INTERVAL=0.001``).

Every rank logs to standard output with its rank as prefix, so the test counts how many ranks said what.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from mpi4py import MPI

from propulate import Float, Islands
from propulate.utils import get_default_propagator, set_logger_config

mode, checkpoint, generations = sys.argv[1], sys.argv[2], int(sys.argv[3])
num_islands = int(sys.argv[4]) if len(sys.argv) > 4 else 1
set_logger_config(log_rank=True)
calls = 0


def loss(params):
    global calls
    calls += 1
    if mode == "fail":
        raise ValueError("this loss always fails")
    if mode == "signal" and calls == 2:
        os.kill(os.getpid(), signal.SIGINT)
    if mode == "lag" and MPI.COMM_WORLD.rank == 0:
        time.sleep(1.0)
    return params["x"]


limits = {"x": Float(1e-3, 1.0, log=True)}
islands = Islands(
    loss,
    get_default_propagator(4, limits, rng=1),
    1,
    generations=generations,
    num_islands=num_islands,
    checkpoint_path=checkpoint,
    grace_period=5.0,
)
raised = None
try:
    islands.propulate(debug=1)
except Exception as err:  # the test reads what was raised
    raised = f"{type(err).__name__}: {err}"
# One line per rank, printed by rank 0: lines printed by several ranks at once may interleave.
everyone = MPI.COMM_WORLD.gather(raised)
if everyone is not None:
    for rank, text in enumerate(everyone):
        if text is not None:
            print(f"RAISED on rank {rank}: {text}", flush=True)
