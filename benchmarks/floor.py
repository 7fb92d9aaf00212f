"""The physical floor of an asynchronous island: share one small result with every other rank, nothing else.

Every rank plays a worker whose loss costs nothing. Each "evaluation" builds a small message shaped like
an evaluated individual (a float64 position of ``--dims`` slots, a loss, a few ints), pickles it once,
starts a non-blocking send (``Isend``) of it to every other rank, keeping the buffer until the send
completes, and takes in whatever has arrived (``Iprobe``/``Recv`` and tests of its sends until a round
finds nothing new), counting it. No breeding, no bookkeeping, no checkpoint, no logging. After its last
evaluation a rank goes on taking in messages the same way until it has counted all of them (it knows how
many: ``generations`` from every other rank) and its own sends have completed: only then has every result
reached every rank, as at the end of a propulate run. While it waits, a rank that found nothing new
yields the processor, as propulate's own end-of-run drain does: with more ranks than cores, the messages
still on their way sit in the queues of ranks that are not running, and a waiting rank that kept polling
would take the processor from them (at 4 ranks on 2 cores that stretched the floor from about 65 to about
250 µs per evaluation).

Usage::

    mpiexec -n 4 python benchmarks/floor.py --generations 5000

Rank 0 prints one JSON line. ``floor_us_per_evaluation_per_worker`` is the slowest rank's wall-clock time
from the first evaluation until everything has arrived, in microseconds, divided by the generations per
rank: the least any loop with this message pattern can cost on this machine and MPI, the floor that
``overhead.py`` compares propulate with. ``loop_us_per_evaluation_per_worker`` is the same for the
evaluations alone, without waiting for what is still on its way, and ``received_in_loop`` the share of
the messages that had arrived by then. With more ranks than cores, ranks run by turns, and messages sent
to a rank that is not running wait in the sender's queue; then the loop alone runs far ahead of the
messages, and only the first figure says what sharing the results costs.

With ``--sleep S`` the stand-in for the loss sleeps ``S`` seconds before each message, and the line adds
``throughput_vs_ideal``: evaluations per second of all ranks over ``ranks / S``, the most a loop with this
message pattern reaches with that loss (what ``overhead.py --sleep S`` is compared with). ``--synchronous``
sends with ``Issend``, as propulate's mailbox does, to show what waiting for the receivers' matches costs.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from collections import deque
from typing import Any

import numpy as np
from mpi4py import MPI

TAG = 7

# Give the processor to another runnable process, if there is one (not available on every platform).
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def floor_loop(
    comm: MPI.Comm, generations: int, dims: int, sleep: float = 0.0, synchronous: bool = False
) -> dict[str, Any]:
    """Run the floor loop on every rank of ``comm`` (collective); return this rank's figures.

    Parameters
    ----------
    comm : MPI.Comm
        The ranks taking part; a duplicate is used, so user traffic on ``comm`` cannot interfere.
    generations : int >= 1
        Messages each rank builds and sends to every other rank.
    dims : int >= 1
        Slots of the position carried by each message.
    sleep : float >= 0
        Seconds the stand-in for the loss function sleeps before each message is built (0: none).
    synchronous : bool
        Send with ``Issend``, as propulate's mailbox does (a send completes once the receiver matched it),
        instead of ``Isend``.

    Returns
    -------
    dict
        ``seconds`` (wall-clock time until everything has arrived and every send has completed),
        ``loop_seconds`` (until the last evaluation), ``received_in_loop`` (messages taken in by then),
        ``received`` (all of them) and ``bytes_per_message`` (the pickled size).
    """
    comm = comm.Dup()
    peers = [rank for rank in range(comm.size) if rank != comm.rank]
    expected = generations * len(peers)
    pending: deque[tuple[MPI.Request, bytes]] = deque()
    status = MPI.Status()
    position = np.zeros(dims)
    start_send = comm.Issend if synchronous else comm.Isend
    size = 0
    received = 0

    def take_in() -> None:
        """Receive and unpickle whatever has arrived; release the buffers of completed sends.

        Rounds of probes and tests go on until one takes in nothing and completes nothing: MPICH's
        shared-memory transport takes in one packet per call into its progress engine, so stopping at the
        first probe that finds nothing would leave messages queued (as propulate's mailbox learned).
        """
        nonlocal received
        busy = True
        while busy:
            busy = False
            while comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=status):
                incoming = bytearray(status.Get_count(MPI.BYTE))
                comm.Recv([incoming, MPI.BYTE], source=status.Get_source(), tag=TAG)
                pickle.loads(incoming)
                received += 1
                busy = True
            while pending and pending[0][0].Test():
                pending.popleft()
                busy = True

    comm.Barrier()
    start = time.perf_counter()
    for generation in range(generations):
        if sleep > 0:
            time.sleep(sleep)  # the loss function
        # The stand-in for one evaluated individual: its embedding, its loss and its provenance.
        message = (position + generation, float(generation), generation, comm.rank, 0, 1)
        buffer = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        size = len(buffer)
        for dest in peers:
            pending.append((start_send([buffer, MPI.BYTE], dest=dest, tag=TAG), buffer))
        take_in()
    loop_seconds = time.perf_counter() - start
    received_in_loop = received
    while received < expected or pending:
        before = (received, len(pending))
        take_in()
        if (received, len(pending)) == before:
            # Nothing new: let a rank whose sends still wait in its queue run (as propulate's drain does).
            _yield()
    seconds = time.perf_counter() - start
    comm.Barrier()
    comm.Free()
    return {
        "seconds": seconds,
        "loop_seconds": loop_seconds,
        "received_in_loop": received_in_loop,
        "received": received,
        "bytes_per_message": size,
    }


def measure_floor(
    comm: MPI.Comm, generations: int, dims: int = 10, sleep: float = 0.0, synchronous: bool = False
) -> dict[str, Any] | None:
    """Run :func:`floor_loop` (collective); rank 0 returns the JSON-ready figures, the others ``None``."""
    figures = comm.gather(floor_loop(comm, generations, dims, sleep, synchronous))
    if comm.rank != 0:
        return None
    assert figures is not None
    seconds = max(f["seconds"] for f in figures)
    loop_seconds = max(f["loop_seconds"] for f in figures)
    expected = comm.size * (comm.size - 1) * generations
    line = {
        "benchmark": "floor",
        "ranks": comm.size,
        "generations": generations,
        "dims": dims,
        "sleep_s": sleep,
        "synchronous": synchronous,
        "floor_us_per_evaluation_per_worker": 1e6 * seconds / generations,
        "loop_us_per_evaluation_per_worker": 1e6 * loop_seconds / generations,
        "received_in_loop": sum(f["received_in_loop"] for f in figures) / max(expected, 1),
        "messages_per_evaluation": comm.size - 1,
        "bytes_per_message": figures[0]["bytes_per_message"],
    }
    if sleep > 0:
        # Evaluations per second of all ranks (ranks x generations / seconds) over the ideal, ranks / sleep.
        line["throughput_vs_ideal"] = generations * sleep / seconds
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=5000, help="messages per rank (default 5000)")
    parser.add_argument("--dims", type=int, default=10, help="slots of the position (default 10)")
    parser.add_argument("--repeat", type=int, default=1, help="measure this many times (default 1)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds the loss sleeps (default 0)")
    parser.add_argument("--synchronous", action="store_true", help="Issend, as propulate's mailbox")
    args = parser.parse_args()
    if args.generations < 1 or args.dims < 1 or args.repeat < 1 or args.sleep < 0:
        parser.error("--generations, --dims and --repeat must be positive, --sleep non-negative")
    comm = MPI.COMM_WORLD
    floor_loop(comm, 100, args.dims)  # warm-up: connections, first allocations
    for _ in range(args.repeat):
        line = measure_floor(comm, args.generations, args.dims, args.sleep, args.synchronous)
        if line is not None:
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
