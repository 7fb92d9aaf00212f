"""The TPE propagator under MPI: what the loop tells it of the island's pending evaluations.

The rest of its MPI behaviour is checked with the other propagators: duplicate freedom
(``test_duplicates.py``), every parameter type with islands, pollination, two-rank workers and a resume
(``test_parameter_types.py``).
"""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_workers_are_told_what_their_peers_evaluate(mpirun, ranks):
    out = mpirun("tpe_pending.py", ranks, "--generations", "12", timeout=180).stdout
    assert "OK" in out.splitlines(), out[-4000:]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    if ranks == 1:
        assert result["mean_pending"] == 0
    else:
        # Every evaluation sleeps: most of the time the other workers are busy when a worker breeds.
        assert result["mean_pending"] >= 0.5 * (ranks - 1), result
