"""Mailbox under mpiexec: one receive() takes in messages queued behind acknowledgements of its own sends.

Ranks pair up (0 with 1, 2 with 3, ...). In each pair the even rank ``a`` sends ``--messages``
synchronous messages to the odd rank ``b`` and then stays out of MPI; ``b`` receives them all, which
queues one acknowledgement per message at ``a``, then sends as many messages of its own to ``a`` and
creates a flag file. Once the flag is there, ``a`` calls ``receive()`` once: it must return every message
``b`` sent (MPICH takes in one packet per poll, so a receiver that stops at the first probe that finds
nothing would return none of them here) and leave none of its own sends pending. Exits non-zero on
failure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _verdict import verdict
from mpi4py import MPI

from propulate.mpi.messaging import Mailbox, Tag, drain


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--flags", type=Path, required=True)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    count = args.messages
    mailbox = Mailbox(comm, window=count + 1)  # no batching: one message per send
    partner = comm.rank ^ 1
    flag = args.flags / f"sent-to-{comm.rank & ~1}"
    failures: list[str] = []
    if partner < comm.size and comm.rank % 2 == 0:
        for number in range(count):
            mailbox.send(number, [partner], Tag.ISLAND_UPDATE)
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.01)  # no MPI call: the acknowledgements and the partner's messages stay queued
        time.sleep(0.2)
        received = mailbox.receive(Tag.ISLAND_UPDATE)
        if received != [(partner, number) for number in range(count)]:
            failures.append(f"rank {comm.rank}: one receive() returned {received}, expected {count} messages")
        if mailbox.n_pending:
            failures.append(f"rank {comm.rank}: {mailbox.n_pending} of its sends still pending")
    elif partner < comm.size:
        got: list[int] = []
        while len(got) < count:
            got.extend(number for _, number in mailbox.receive(Tag.ISLAND_UPDATE))
            time.sleep(0.001)
        for number in range(count):
            mailbox.send(number, [partner], Tag.ISLAND_UPDATE)
        flag.touch()
    drain(mailbox, lambda: bool(mailbox.receive(Tag.ISLAND_UPDATE)))
    verdict(comm, failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
