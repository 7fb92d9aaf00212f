"""Migration topologies under mpiexec: immigrants arrive only along the topology, in the numbers sent.

Each case runs ``programs/topology_run.py`` (one launch per rank count runs its cases in turn), which
counts every island's migration events and, after the run, the immigrants of each island by the island they
came from, and asserts collectively that they match the topology (see its docstring). 4 and 8 ranks
oversubscribe a 2-core machine.
"""

from __future__ import annotations

import re

import pytest

from propulate.migration import complete_topology, hypercube_topology, ring_topology
from tests.mpi.test_island_model import result_of

from .conftest import Cases

DEFAULTS = [(4, 4), (8, 4), (8, 8)]
NAMES = ["complete", "ring", "hypercube"]

CASES: dict[str, tuple[int, list[str]]] = {}
for ranks, num_islands in DEFAULTS:
    CASES[f"default-{ranks}-{num_islands}"] = (ranks, ["--num-islands", str(num_islands)])
for name in NAMES:
    CASES[f"named-{name}"] = (8, ["--num-islands", "8", "--topology", name])
CASES["migration"] = (8, ["--num-islands", "8", "--migration"])
CASES["more-islands-than-workers"] = (4, ["--num-islands", "8", "--topology", "hypercube"])
# Each resume test: its first run, then the resumed one on the same checkpoint, in that order.
CASES["old-default-first"] = (4, ["--num-islands", "4", "--topology", "complete", "--generations", "10"])
CASES["old-default-resumed"] = (4, ["--num-islands", "4", "--generations", "20", "--resumed"])
CASES["array-first"] = (4, ["--num-islands", "4", "--as-array", "--generations", "10"])
CASES["array-resumed"] = (4, ["--num-islands", "4", "--generations", "20", "--resumed"])
for case, (ranks, args) in CASES.items():
    folder = case.removesuffix("-first").removesuffix("-resumed")
    CASES[case] = (ranks, [*args, "--checkpoint", f"{{tmp}}/{folder}"])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """The cases above, in one launch per rank count (2 launches instead of 12)."""
    return Cases("topology_run.py", CASES, tmp_path_factory.mktemp("topology"), timeout=180)


def run_topology(cases: Cases, name: str) -> tuple[str, dict]:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    return out.stdout, result_of(out.stdout)


@pytest.mark.parametrize(("ranks", "num_islands"), DEFAULTS)
def test_default_topology_sends_along_the_power_of_two_jumps(cases, ranks, num_islands):
    out, result = run_topology(cases, f"default-{ranks}-{num_islands}")
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


@pytest.mark.parametrize("name", NAMES)
def test_named_topologies_at_eight_islands(cases, name):
    _, result = run_topology(cases, f"named-{name}")
    built = {"complete": complete_topology, "ring": ring_topology, "hypercube": hypercube_topology}[name]
    assert result["topology"] == built(8).tolist()


def test_migration_moves_individuals_only_along_the_topology(cases):
    _, result = run_topology(cases, "migration")
    assert sum(map(sum, result["received"])) > 0, result


def test_a_name_is_built_for_the_islands_that_exist(cases):
    # 8 islands asked of 4 workers: one island per worker, and the hypercube of 4 islands.
    out, result = run_topology(cases, "more-islands-than-workers")
    assert result["topology"] == hypercube_topology(4).tolist()
    assert "migration topology 'hypercube': 2 target island(s) per island" in out


def test_resuming_a_checkpoint_of_the_old_default_logs_the_new_topology(cases):
    run_topology(cases, "old-default-first")
    out, result = run_topology(cases, "old-default-resumed")
    assert result["topology"] == hypercube_topology(4).tolist()
    changed = [line for line in out.splitlines() if "settings differ from the checkpoint's" in line]
    assert len(changed) == 1 and "migration topology 'complete' -> 'hypercube'" in changed[0], out


def test_a_checkpoint_that_stored_the_array_of_the_default_resumes_onto_its_name(cases):
    # Checkpoints written before topologies had names stored the array, e.g. the one the default builds.
    run_topology(cases, "array-first")
    out, result = run_topology(cases, "array-resumed")
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
