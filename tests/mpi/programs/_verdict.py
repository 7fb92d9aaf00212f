"""The end of a test program that checks something on every rank: one verdict, printed by rank 0."""

from __future__ import annotations

import os
from typing import Any

from mpi4py import MPI


def verdict(comm: MPI.Comm, failures: list[str], **figures: Any) -> None:
    """Collective: rank 0 prints every rank's failures and ``FAILED`` (and aborts the job), or ``OK``.

    The ``OK`` line lists each of ``figures`` as ``name=[value of rank 0, value of rank 1, ...]``. Frees
    ``comm`` (a program's own duplicate) after a barrier.
    """
    summary = comm.gather((failures, figures))
    if comm.rank == 0:
        assert summary is not None
        problems = [line for lines, _ in summary for line in lines]
        for line in problems:
            print(line, flush=True)
        if problems:
            print("FAILED", flush=True)
            comm.Abort(1)
            os._exit(1)  # this MPICH's MPI_Abort may return: never print OK after FAILED
        listed = " ".join(f"{name}={[ranks[name] for _, ranks in summary]}" for name in figures)
        print(f"OK {listed}".rstrip(), flush=True)
    comm.Barrier()
    comm.Free()
