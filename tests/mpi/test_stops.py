"""Stops and failures as a cluster delivers them: multi-rank workers stop as a unit, nothing hangs.

``PROPULATE_TEST_STOP_RUNS`` sets how many SIGTERM runs each case makes (default 2; the closing figures of
issue 18 were taken with 20).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from propulate import load_checkpoint

from .conftest import finish_job, kill_job, start_job

RUNS = int(os.environ.get("PROPULATE_TEST_STOP_RUNS", "2"))
GRACE = 1.0


def result_of(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def start(directory: Path, ranks: int, *args: str) -> subprocess.Popen:
    return start_job("stops.py", ranks, "--checkpoint", str(directory), *args)


def finish(proc: subprocess.Popen, limit: float) -> str:
    return finish_job(proc, limit).stdout


def run(directory: Path, ranks: int, *args: str, limit: float = 120) -> dict:
    proc = start(directory, ranks, *args)
    out = finish(proc, limit)
    assert proc.returncode == 0, out[-6000:]
    return result_of(out)


def wait_until_evaluating(proc: subprocess.Popen, directory: Path, ranks: int) -> None:
    deadline = time.monotonic() + 90
    while len(list(directory.glob("evaluating-*"))) < ranks:
        if time.monotonic() > deadline or proc.poll() is not None:
            kill_job(proc)
            pytest.fail(f"the job did not start evaluating:\n{proc.communicate()[0][-4000:]}")
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("mode", "ranks"),
    [
        ("mpi", 2),  # one 2-rank worker all-reducing with MPI every few ms
        ("mpi", 4),  # two such workers
        # One and two 2-rank workers training with DDP (gloo): a rank blocked in gloo's all-reduce inside
        # backward() is released when its partner leaves (abort_worker_process_group shuts down the group's
        # connections).
        pytest.param("torch", 2, marks=pytest.mark.torch),
        pytest.param("torch", 4, marks=pytest.mark.torch),
    ],
)
def test_sigterm_stops_multi_rank_workers_cleanly_and_the_run_resumes(tmp_path, mode, ranks):
    if mode == "torch":
        pytest.importorskip("torch")
    workers = ranks // 2
    chance = random.Random(f"{mode}-{ranks}")
    for attempt in range(RUNS):
        directory = tmp_path / f"run-{attempt}"
        directory.mkdir()
        proc = start(directory, ranks, "--mode", mode, "--ranks-per-worker", "2", "--grace", str(GRACE))
        wait_until_evaluating(proc, directory, ranks)
        time.sleep(chance.uniform(0.2, 2.5))  # anywhere in an evaluation (1 - 2 s each)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # to the launcher, which forwards it to every rank
        out = finish(proc, GRACE + 30)
        took = time.monotonic() - sent
        assert proc.returncode == 0, f"run {attempt}: exit code {proc.returncode}:\n{out[-6000:]}"
        assert took < GRACE + 10, f"run {attempt}: {took:.1f} s after SIGTERM"
        assert "stopped early" in out
        done = [info.generation_end for info in load_checkpoint(directory).writers.values()]
        target = max(done) + 1
        args = ["--mode", mode, "--ranks-per-worker", "2", "--steps", "5", "--generations", str(target)]
        result = run(directory, ranks, *args)
        assert result["generations"] == [target] * workers
        checkpoint = load_checkpoint(directory)
        assert not checkpoint.pending, "interrupted evaluations were done again"
        assert len(checkpoint.population) == workers * target, "nothing redone, nothing skipped"


@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.parametrize("component", ["propagator", "surrogate", "writer"])
def test_a_rank_failing_outside_the_loss_makes_every_rank_raise(tmp_path, ranks, component):
    started = time.monotonic()
    result = run(tmp_path, ranks, "--mode", f"fail-{component}", "--sleep", "0.05", "--failing-rank", "1")
    assert time.monotonic() - started < 30 + 15  # the job's start and end included
    outcomes = [calls[0] for calls in result["outcomes"]]
    assert outcomes[1].startswith(("ValueError", "ZeroDivisionError", "PermissionError")), outcomes[1]
    for rank, outcome in enumerate(outcomes):
        if rank != 1:
            assert outcome.startswith("WorkerFailedError: rank 1 on "), outcome
            assert "injected" in outcome, "the failing rank's traceback is in every rank's error"
    assert max(calls[0] for calls in result["elapsed"]) < 30
    # Nothing evaluated is lost: every worker's finished evaluations are in the checkpoint.
    assert len(load_checkpoint(tmp_path).population) == sum(result["generations"])


def test_a_failure_reaches_the_sub_ranks_of_multi_rank_workers(tmp_path):
    args = ["--mode", "fail-propagator", "--ranks-per-worker", "2", "--failing-rank", "2", "--sleep", "0.05"]
    result = run(tmp_path, 4, *args)
    outcomes = [calls[0] for calls in result["outcomes"]]
    assert outcomes[2].startswith("ValueError: injected failure while breeding on rank 2")
    assert all(outcomes[r].startswith("WorkerFailedError: rank 2 on ") for r in (0, 1, 3)), outcomes


@pytest.mark.parametrize("sleeps", [["0.2", "3"], ["0.2", "3.8"]])
def test_time_limit_is_a_promise(tmp_path, sleeps):
    args = ["--mode", "sleep", "--sleeps", *sleeps, "--time-limit", "4", "--generations", "-1"]
    result = run(tmp_path, 4, *args)
    assert all(calls[0] < 4.0 for calls in result["elapsed"]), result["elapsed"]
    assert all(calls == ["returned"] for calls in result["outcomes"])
    checkpoint = load_checkpoint(tmp_path)
    if sleeps[1] == "3.8":  # interrupted at 3.5 s, done again on resume
        assert sum(len(inds) for inds in checkpoint.pending.values()) == 2
    else:
        assert not checkpoint.pending


def test_the_callers_handlers_and_timer_keep_working(tmp_path):
    proc = start(tmp_path, 2, "--mode", "handlers")
    wait_until_evaluating(proc, tmp_path, 2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGUSR1)  # a stop signal for propulate, and the caller's own handler runs too
    out = finish(proc, 30)
    assert proc.returncode == 0, out[-6000:]
    for outcome in result_of(out)["outcomes"]:
        returned, caller = outcome
        assert returned == "returned"
        _, left, _, usr1, _, during, after = caller.split()
        assert float(left) > 0, "the caller's interval timer was not cancelled"
        assert int(usr1) == 1, "the caller's SIGUSR1 handler ran, chained"
        assert int(during) >= 3, "the caller's timer reached its handler during the run"
        assert int(after) >= 1, "and after it"


def test_propulate_can_be_called_again_and_continues(tmp_path):
    args = ["--mode", "sleep", "--calls", "2", "--time-limit", "1.5", "--generations", "15", "--sleep", "0.1"]
    result = run(tmp_path, 4, *args)
    assert result["generations"] == [15] * 4
    assert all(calls == ["returned", "returned"] for calls in result["outcomes"])
    assert result["elapsed"][0][0] < 1.5
    checkpoint = load_checkpoint(tmp_path)
    assert len(checkpoint.population) == 4 * 15 and not checkpoint.pending
