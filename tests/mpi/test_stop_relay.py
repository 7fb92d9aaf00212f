"""A stop or failure of one worker, or of all at once, reaches every rank over the tree of worker roots.

Every case asserts collectively: every rank ends the same way, every worker root took the same stop (reason
and abort), nothing evaluated is lost, and no worker root sent more than ``ceil(log2 W)`` alarm messages to
other worker roots for the stop (``W`` workers; the tree has no rank of higher degree).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from propulate import Status, load_checkpoint

NO_THREADS = {"MPI4PY_RC_THREAD_LEVEL": "funneled"}  # only the main thread may call MPI: no watchdog polls


def relay(launch, directory: Path, ranks: int, *args: str, env: dict[str, str] | None = None) -> list[dict]:
    result = launch("stop_relay.py", ranks, "--checkpoint", str(directory), *args, timeout=90, env=env)
    assert result.returncode == 0, result.stdout[-6000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def roots_of(report: list[dict]) -> list[dict]:
    return [rank for rank in report if rank["stop"] is not None]


def bound(workers: int) -> int:
    """The most neighbours a rank has in the binomial tree of ``workers`` ranks."""
    return math.ceil(math.log2(workers)) if workers > 1 else 0


def assert_intact(directory: Path, roots: list[dict], failed: int = 0) -> None:
    checkpoint = load_checkpoint(directory)
    assert not checkpoint.pending, "every evaluation under way finished (a peer's stop has no grace period)"
    statuses = [ind.status for ind in checkpoint.population]
    assert len(statuses) == sum(root["generation"] for root in roots), "nothing evaluated is lost"
    assert statuses.count(Status.FAILED) == failed


@pytest.mark.parametrize(
    ("ranks", "per_worker", "origin"),
    [(1, 1, 0), (2, 1, 1), (4, 1, 3), (8, 1, 5), (8, 1, 0), (4, 2, 2), (4, 2, 3)],
)
def test_a_stop_signal_on_one_rank_stops_every_worker(mpilaunch, tmp_path, ranks, per_worker, origin):
    args = ["--mode", "signal", "--origin", str(origin), "--ranks-per-worker", str(per_worker)]
    report = relay(mpilaunch, tmp_path, ranks, *args)
    roots = roots_of(report)
    assert all(rank["outcomes"] == ["returned"] for rank in report)
    # A sub-rank's signal reaches its worker's root first, which asks the run to stop.
    reason = (
        "SIGUSR1 received" if origin % per_worker == 0 else "a rank of this worker received a stop signal"
    )
    assert [root["stop"] for root in roots] == [[reason, False]] * len(roots)
    assert max(root["sent"] for root in roots) <= bound(len(roots))
    assert sum(root["sent"] for root in roots) == len(roots) - 1, "one originator: once over every edge"
    assert_intact(tmp_path, roots)


@pytest.mark.parametrize(("ranks", "origin"), [(2, 1), (4, 2), (8, 7)])
@pytest.mark.parametrize("at", ["4", "last"])
def test_a_failed_evaluation_with_on_failure_stop_aborts_every_worker(mpilaunch, tmp_path, ranks, origin, at):
    args = ["--mode", "abort", "--origin", str(origin)]
    if at == "last":
        # The others finished their generations before the abort: they raise too, as it counts for the run.
        args += ["--at", "-1", "--generations", "4", "--sleep", "0.02", "--slow", "25"]
    else:
        args += ["--at", at]
    report = relay(mpilaunch, tmp_path, ranks, *args)
    roots = roots_of(report)
    reason = f"worker {origin} of island 0 failed"
    assert [rank["outcomes"] for rank in report] == [
        [f"RunAbortedError: the run stopped on a failed evaluation: {reason}"]
    ] * ranks
    assert [root["stop"] for root in roots] == [[reason, True]] * ranks
    assert max(root["sent"] for root in roots) <= bound(ranks)
    assert_intact(tmp_path, roots, failed=1)


@pytest.mark.parametrize(("ranks", "per_worker"), [(2, 1), (4, 1), (8, 1), (4, 2)])
def test_every_worker_reaching_the_time_limit_together_ends_the_run(mpilaunch, tmp_path, ranks, per_worker):
    args = ["--mode", "time-limit", "--time-limit", "3", "--ranks-per-worker", str(per_worker)]
    report = relay(mpilaunch, tmp_path, ranks, *args)
    roots = roots_of(report)
    assert all(rank["outcomes"] == ["returned"] and rank["elapsed"][0] < 3.0 for rank in report)
    assert [root["stop"] for root in roots] == [["the time limit is near", False]] * len(roots)
    # Concurrent requests cost no more: a rank sends a stop once, to its neighbours, whoever asked first.
    assert max(root["sent"] for root in roots) <= bound(len(roots))
    assert sum(root["sent"] for root in roots) <= 2 * (len(roots) - 1)
    assert_intact(tmp_path, roots)


@pytest.mark.parametrize(("ranks", "origin"), [(4, 3), (8, 6), (8, 0)])
def test_a_failure_on_one_rank_reaches_every_rank(mpilaunch, tmp_path, ranks, origin):
    report = relay(mpilaunch, tmp_path, ranks, "--mode", "fail", "--origin", str(origin))
    for rank, result in enumerate(report):
        (outcome,) = result["outcomes"]
        if rank == origin:
            assert outcome.startswith(f"ValueError: injected failure while breeding on rank {origin}")
        else:
            assert outcome.startswith(f"WorkerFailedError: rank {origin} on "), outcome
            assert "injected failure" in outcome, "the failing rank's traceback reaches every rank"
    roots = roots_of(report)
    assert max(root["sent"] for root in roots) <= bound(ranks)
    assert_intact(tmp_path, roots)


@pytest.mark.parametrize(
    ("ranks", "args"),
    [
        (8, ["--mode", "signal", "--origin", "6"]),
        (4, ["--mode", "abort", "--origin", "3", "--at", "-1", "--generations", "4", "--sleep", "0.02"]),
        (4, ["--mode", "fail", "--origin", "3"]),
    ],
)
def test_without_thread_multiple_the_main_thread_relays(mpilaunch, tmp_path, ranks, args):
    report = relay(mpilaunch, tmp_path, ranks, *args, env=NO_THREADS)
    assert not any(rank["threads"] for rank in report), "the watchdog thread did not poll"
    endings = {rank["outcomes"][0].split(":")[0] for rank in report}
    assert endings == {"signal": {"returned"}, "abort": {"RunAbortedError"}}.get(
        args[1], {"ValueError", "WorkerFailedError"}
    )
    roots = roots_of(report)
    assert len({json.dumps(root["stop"]) for root in roots}) == 1
    assert max(root["sent"] for root in roots) <= bound(ranks)


def test_a_stop_of_one_call_does_not_reach_into_the_next(mpilaunch, tmp_path):
    args = ["--mode", "signal", "--origin", "7", "--at", "2", "--calls", "2", "--generations", "10"]
    report = relay(mpilaunch, tmp_path, 8, *args)
    roots = roots_of(report)
    assert all(rank["outcomes"] == ["returned", "returned"] for rank in report)
    assert [root["generation"] for root in roots] == [10] * 8, "the second call ran to its end"
    assert [root["stop"] for root in roots] == [[None, False]] * 8
    assert_intact(tmp_path, roots)
