"""Run one test program several times in one job, one case after the other, as mpi4py's tests share a launch.

Usage: ``mpiexec -n N python _cases.py PROGRAM CASES``, where ``CASES`` is a JSON object that maps each case's
name to the program's argument list. Every rank waits for the others before a case begins; then rank 0 prints
``CASE name`` and the program runs as ``__main__`` with those arguments. A case that exits non-zero aborts the
job with its exit code, so the remaining cases do not run (``tests/mpi/conftest.py`` starts them anew).

Only rank 0's lines are ordered with respect to the ``CASE`` lines: another rank's line may appear under the
next case. The programs print their ``RESULT`` and verdict lines on rank 0.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
program, cases = sys.argv[1], json.loads(sys.argv[2])
for name, args in cases.items():
    world.Barrier()
    if world.rank == 0:
        print(f"CASE {name}", flush=True)
    sys.argv = [program, *args]
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as end:
        if end.code not in (None, 0):
            print(f"case {name}: rank {world.rank} exited with {end.code}", flush=True)
            code = end.code if isinstance(end.code, int) else 1
            world.Abort(code)
            os._exit(code)  # this MPICH's MPI_Abort may return (seen: the next case began after it)
world.Barrier()
