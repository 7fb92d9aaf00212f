"""The mailbox under mpiexec: order per sender, batching towards slow receivers, an exact drain."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("n", [2, 4, 8])
def test_every_message_arrives_once_in_order_and_drain_is_exact(mpirun, n):
    out = mpirun("mailbox_run.py", n, "--messages", "300", "--window", "2", timeout=120)
    assert "OK messages_sent=" in out.stdout, out.stdout + out.stderr
    # Slow receivers made their peers batch: fewer MPI messages than messages sent.
    batched = out.stdout.split("batched=")[1]
    assert "True" in batched, out.stdout


@pytest.mark.parametrize("n", [2, 4, 8])
def test_one_receive_takes_in_messages_queued_behind_acknowledgements(mpirun, n, tmp_path):
    # MPICH takes in one packet per poll: a receive that stopped at the first empty probe returned nothing.
    out = mpirun("mailbox_backlog.py", n, "--messages", "10", "--flags", str(tmp_path), timeout=120)
    assert "OK" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_mark_is_matched_once_every_receiver_took_its_messages_in(mpirun, n):
    # What a worker waits for before it evaluates a configuration of a finite space (Propulator._claim).
    out = mpirun("mailbox_mark.py", n, timeout=120)
    assert "OK" in out.stdout.splitlines(), out.stdout + out.stderr
