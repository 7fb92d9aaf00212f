"""The one message plane: every tag distinct, sends that keep their buffers, the worker channel's kinds."""

from __future__ import annotations

from mpi4py import MPI

from propulate.mpi.dissemination import children, tree_neighbours
from propulate.mpi.messaging import Sends, Tag


def test_every_tag_is_distinct() -> None:
    assert len({int(tag) for tag in Tag}) == len(Tag)


def test_sends_keep_their_buffers_until_complete() -> None:
    comm = MPI.COMM_SELF.Dup()
    try:
        sends = Sends()
        buffer = bytearray(b"notice")
        sends.add(comm.Isend([buffer, MPI.BYTE], dest=0, tag=int(Tag.STOP_RUN)), buffer)
        sends.prune()
        assert len(sends) == 1 or len(sends) == 0  # eager sends may complete before they are received
        received = bytearray(6)
        comm.Recv([received, MPI.BYTE], source=0, tag=int(Tag.STOP_RUN))
        assert received == buffer
        sends.prune()
        assert len(sends) == 0
        sends.close()
    finally:
        comm.Free()


def test_the_alarm_tree_is_the_binomial_relay_tree_rooted_at_zero() -> None:
    for size in (1, 2, 7, 64, 100):
        for rank in range(size):
            neighbours = tree_neighbours(rank, size)
            below = neighbours[1:] if rank else neighbours
            assert below == children(rank, size, 2)
