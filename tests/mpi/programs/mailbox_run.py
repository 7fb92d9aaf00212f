"""Mailbox under mpiexec: every message arrives once, in order per sender, batched or not; drain is exact.

Every rank sends ``--messages`` numbered messages to every other rank as fast as it can, with a small
window so that batching happens; odd ranks are slow receivers (they sleep between polls), so messages to
them pile up in outboxes. After ``drain`` every rank must hold exactly the messages each peer sent it,
in the order sent, and have nothing pending. Exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import sys
import time

from _verdict import verdict
from mpi4py import MPI

from propulate.mpi.messaging import Mailbox, Tag, drain


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--window", type=int, default=2)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    mailbox = Mailbox(comm, window=args.window, max_delay=0.01)
    peers = [r for r in range(comm.size) if r != comm.rank]
    got: dict[int, list[int]] = {r: [] for r in peers}

    def take_in() -> bool:
        messages = mailbox.receive(Tag.ISLAND_UPDATE)
        for source, (sender, number, payload) in messages:
            assert source == sender and payload == [sender] * (number % 7), (source, sender, number)
            got[source].append(number)
        return bool(messages)

    for number in range(args.messages):
        mailbox.send((comm.rank, number, [comm.rank] * (number % 7)), peers, Tag.ISLAND_UPDATE)
        if comm.rank % 2:
            time.sleep(0.0005)  # a slow receiver: its peers' messages to it wait and are batched
        take_in()
    drain(mailbox, take_in)
    failures = [
        f"rank {comm.rank}: from {r} got {len(got[r])} messages, out of order or missing"
        for r in peers
        if got[r] != list(range(args.messages))
    ]
    if mailbox.n_pending:
        failures.append(f"rank {comm.rank}: {mailbox.n_pending} messages still pending after drain")
    batched = mailbox.messages_sent < args.messages * len(peers)
    verdict(comm, failures, messages_sent=mailbox.messages_sent, batched=batched)
    return 0


if __name__ == "__main__":
    sys.exit(main())
