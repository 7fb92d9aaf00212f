"""Mailbox.mark / Mailbox.matched under mpiexec: a mark is matched exactly once its receivers took it in.

Rank 0 sends three messages to every other rank with a window of 1, so that the second and third wait in
its outboxes, and marks them. Until the receivers poll (they wait in a barrier that rank 0 enters only after
checking), the mark must not be matched, however often rank 0 tests; once every receiver took in all three
messages, it must become matched within the timeout. A mark over no destination is matched at once.
Exits non-zero on failure.
"""

from __future__ import annotations

import sys
import time

from _verdict import verdict
from mpi4py import MPI

from propulate.mpi.messaging import Backoff, Mailbox, Tag, drain


def main() -> int:
    comm = MPI.COMM_WORLD.Dup()
    mailbox = Mailbox(comm, window=1, max_delay=60.0)
    peers = [r for r in range(comm.size) if r != 0]
    failures: list[str] = []
    comm.Barrier()
    if comm.rank == 0:
        if not mailbox.matched(mailbox.mark(peers)):
            failures.append("a mark before any message is not matched")
        for number in range(3):
            mailbox.send(number, peers, Tag.ISLAND_UPDATE)
        mark = mailbox.mark(peers)
        for _ in range(100):
            if mailbox.matched(mark):
                failures.append("matched before any receiver polled")
                break
        comm.Barrier()  # the receivers take the messages in after this
        deadline = time.monotonic() + 30
        backoff = Backoff()
        while not mailbox.matched(mark):
            if time.monotonic() > deadline:
                failures.append("not matched 30 s after every receiver took the messages in")
                break
            backoff.wait()
        if not mailbox.matched({}):
            failures.append("an empty mark is not matched")
    else:
        comm.Barrier()
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(obj for _, obj in mailbox.receive(Tag.ISLAND_UPDATE))
        if got != [0, 1, 2]:
            failures.append(f"rank {comm.rank} took in {got}, expected [0, 1, 2]")
    drain(mailbox, lambda: bool(mailbox.receive(Tag.ISLAND_UPDATE)))
    verdict(comm, failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
