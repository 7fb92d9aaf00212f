"""Print which rank count ran it and exit with the code given (``--code``): a case for ``test_cases.py``."""

from __future__ import annotations

import argparse

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--code", type=int, default=0)
args = parser.parse_args()
if MPI.COMM_WORLD.rank == 0:
    print(f"RAN on {MPI.COMM_WORLD.size} ranks", flush=True)
MPI.COMM_WORLD.Barrier()
raise SystemExit(args.code)
