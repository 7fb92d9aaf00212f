"""Build a layout over ``COMM_WORLD`` and report the launch check's verdict.

Usage: ``python launch_check.py`` (a plain process, an MPI singleton, with the launcher's variables set by
the caller) or ``mpiexec -n N python launch_check.py RANK``, where only world rank ``RANK`` pretends that
``torchrun`` started more processes. Prints ``[rank] launch error: ...`` and exits with 3 on a
``LayoutError``, prints ``[rank] launch ok`` otherwise.
"""

from __future__ import annotations

import os
import sys

from mpi4py import MPI

from propulate.errors import LayoutError
from propulate.mpi.layout import build_layout

world = MPI.COMM_WORLD
if len(sys.argv) > 1 and world.rank == int(sys.argv[1]):
    os.environ.update(WORLD_SIZE=str(world.size + 2), RANK="1")
try:
    build_layout(world, 1, 1, None)
except LayoutError as err:
    print(f"[{world.rank}] launch error: {err}", flush=True)
    sys.exit(3)
print(f"[{world.rank}] launch ok", flush=True)
