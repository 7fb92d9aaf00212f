"""Migration topologies under mpiexec: immigrants arrive only along the topology, in the numbers sent.

Each launch runs ``programs/topology_run.py``, which counts every island's migration events and, after the
run, the immigrants of each island by the island they came from, and asserts collectively that they match
the topology (see its docstring). 4 and 8 ranks oversubscribe a 2-core machine.
"""

from __future__ import annotations

import re

import pytest

from propulate.migration import complete_topology, hypercube_topology, ring_topology
from tests.mpi.test_island_model import result_of


def run_topology(mpirun, ranks, tmp_path, *args):
    out = mpirun("topology_run.py", ranks, *args, "--checkpoint", str(tmp_path), timeout=180)
    return out.stdout, result_of(out.stdout)


@pytest.mark.parametrize(("ranks", "num_islands"), [(4, 4), (8, 4), (8, 8)])
def test_default_topology_sends_along_the_power_of_two_jumps(mpirun, tmp_path, ranks, num_islands):
    out, result = run_topology(mpirun, ranks, tmp_path, "--num-islands", str(num_islands))
    assert result["topology"] == hypercube_topology(num_islands).tolist()
    assert all(events > 0 for events in result["events"]), result
    # Pollination always finds a copy to send: every link carried one immigrant per event of its source.
    sent = [
        [events * entry for entry in row]
        for events, row in zip(result["events"], result["topology"], strict=True)
    ]
    assert result["received"] == sent
    # 30 generations at probability 0.9 per round: about 27 events per island; expected I p ceil(log2 I) x 30.
    assert 0.5 < result["messages"] / result["expected_messages"] < 1.5, result
    assert f"Islands: migration topology 'hypercube': {num_islands.bit_length() - 1} target island(s)" in out


@pytest.mark.parametrize("name", ["complete", "ring", "hypercube"])
def test_named_topologies_at_eight_islands(mpirun, tmp_path, name):
    _, result = run_topology(mpirun, 8, tmp_path, "--num-islands", "8", "--topology", name)
    built = {"complete": complete_topology, "ring": ring_topology, "hypercube": hypercube_topology}[name]
    assert result["topology"] == built(8).tolist()


def test_migration_moves_individuals_only_along_the_topology(mpirun, tmp_path):
    _, result = run_topology(mpirun, 8, tmp_path, "--num-islands", "8", "--migration")
    assert sum(map(sum, result["received"])) > 0, result


def test_a_name_is_built_for_the_islands_that_exist(mpirun, tmp_path):
    # 8 islands asked of 4 workers: one island per worker, and the hypercube of 4 islands.
    out, result = run_topology(mpirun, 4, tmp_path, "--num-islands", "8", "--topology", "hypercube")
    assert result["topology"] == hypercube_topology(4).tolist()
    assert "migration topology 'hypercube': 2 target island(s) per island" in out


def test_resuming_a_checkpoint_of_the_old_default_logs_the_new_topology(mpirun, tmp_path):
    run_topology(mpirun, 4, tmp_path, "--num-islands", "4", "--topology", "complete", "--generations", "10")
    out, result = run_topology(mpirun, 4, tmp_path, "--num-islands", "4", "--generations", "20", "--resumed")
    assert result["topology"] == hypercube_topology(4).tolist()
    changed = [line for line in out.splitlines() if "settings differ from the checkpoint's" in line]
    assert len(changed) == 1 and "migration topology 'complete' -> 'hypercube'" in changed[0], out


def test_a_checkpoint_that_stored_the_array_of_the_default_resumes_onto_its_name(mpirun, tmp_path):
    # Checkpoints written before topologies had names stored the array, e.g. the one the default builds.
    run_topology(mpirun, 4, tmp_path, "--num-islands", "4", "--as-array", "--generations", "10")
    out, result = run_topology(mpirun, 4, tmp_path, "--num-islands", "4", "--generations", "20", "--resumed")
    assert result["topology"] == hypercube_topology(4).tolist()
    assert "Run: resuming from" in out and "settings differ from the checkpoint's" in out, out
    changed = [line for line in out.splitlines() if "settings differ from the checkpoint's" in line]
    assert len(changed) == 1 and "migration topology" not in changed[0], out


def test_an_unknown_name_is_refused_on_every_rank(mpilaunch, tmp_path):
    args = ["--num-islands", "4", "--topology", "star", "--checkpoint", str(tmp_path)]
    result = mpilaunch("topology_run.py", 4, *args, timeout=60)
    assert result.returncode != 0, result.stdout
    reports = re.findall(r"rank (\d+) raised (\w+): (.*?)(?=rank \d+ raised|\n|$)", result.stdout)
    assert sorted(int(rank) for rank, _, _ in reports) == [0, 1, 2, 3], result.stdout
    for _, kind, message in reports:
        assert kind == "LayoutError" and message.startswith("migration_topology: unknown topology 'star'")
        assert all(name in message for name in ("'complete'", "'ring'", "'hypercube'")), message
