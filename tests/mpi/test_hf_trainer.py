"""Hugging Face's Trainer inside multi-rank workers (propulate.integrations.hf_trainer) under mpiexec.

The tutorial runs with 2 and with 4 workers of 2 ranks (gloo) and ASHA, is stopped by SIGTERM in the
middle of an epoch, and resumes: every epoch of every individual is trained once, on both ranks of its
worker, pruned ones included. ``programs/hf_trainer_faults.py`` trains a small model on synthetic data
in several cases per launch (4 ranks): a surrogate that prunes, a rank that raises while its partner waits
for it in DDP's all-reduce, a time limit, and the resume after it; nothing hangs and every rank exits.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from propulate import Status, load_checkpoint

from .conftest import REPO, Cases, kill_job, start_job

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

TRAINED = re.compile(r"^This job trained (\d+) epoch\(s\) and continued (\d+) training\(s\)", re.MULTILINE)
EPOCHS = 4


def epochs_begun(log: Path) -> dict[int, dict[int, list[int]]]:
    """The epoch log as ``{uid: {world rank: [epochs begun, in order]}}``."""
    begun: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for line in log.read_text().splitlines():
        uid, epoch, rank = (int(x) for x in line.split())
        begun[uid][rank].append(epoch)
    return begun


def tutorial(checkpoint: Path, log: Path, interrupt: bool, n: int) -> tuple[str, bool]:
    """Run the tutorial once on ``n`` ranks; with ``interrupt``, SIGTERM it just after some epoch began."""
    args = [
        *("--generations", "2", "--epochs", str(EPOCHS), "--eta", "2", "--batch-size", "8"),
        *("--checkpoint", str(checkpoint), "--epoch-log", str(log), "--top-n", "2", "--method", "gloo"),
    ]
    proc = start_job(REPO / "tutorials" / "hf_trainer_example.py", n, *args)
    signalled = False
    try:
        if interrupt:
            deadline = time.monotonic() + 240
            while proc.poll() is None and time.monotonic() < deadline:
                if log.exists() and len(log.read_text().splitlines()) >= 6:
                    break
                time.sleep(0.02)
            if proc.poll() is None:
                time.sleep(0.2)  # inside the epoch that just began
                proc.send_signal(signal.SIGTERM)  # to the launcher, which forwards it to every rank
                signalled = True
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        kill_job(proc)
        out, _ = proc.communicate()
        pytest.fail(f"the tutorial hung; output:\n{out[-5000:]}")
    assert proc.returncode == 0, f"exit code {proc.returncode}; output:\n{out[-5000:]}"
    return out, signalled


@pytest.mark.parametrize("n", [4, 8])
def test_tutorial_stopped_mid_epoch_resumes_without_training_an_epoch_twice(tmp_path, n):
    """2-rank workers: 2 at 4 ranks, 4 at 8, each training 2 individuals."""
    pytest.importorskip("transformers")
    pytest.importorskip("sklearn")
    checkpoint, log = tmp_path / "checkpoints", tmp_path / "epochs.txt"
    first, signalled = tutorial(checkpoint, log, interrupt=True, n=n)
    assert signalled, f"the job ended before it could be interrupted:\n{first[-3000:]}"
    assert "SIGTERM received" in first, first[-3000:]
    pending = [ind for inds in load_checkpoint(checkpoint).pending.values() for ind in inds]
    assert pending, "the SIGTERM came while trainings ran: they are continued on resume"
    for ind in pending:  # stopped at a commit: the Trainer's checkpoint of a whole epoch is there
        folder = checkpoint / "evaluations" / str(ind.uid)
        assert list(folder.glob("step-*/checkpoint-*/trainer_state.json")), ind.uid

    second, _ = tutorial(checkpoint, log, interrupt=False, n=n)
    best = re.findall(
        r"^\d\. evaluation loss (\d+\.\d+), accuracy .*, (\d) epoch\(s\): \{", second, re.MULTILINE
    )
    (trained_first, _), (trained_second, continued) = (
        tuple(int(x) for x in TRAINED.findall(out)[0]) for out in (first, second)
    )
    assert continued >= 1, second[-3000:]

    individuals = [ind for inds in load_checkpoint(checkpoint).populations.values() for ind in inds]
    assert len(individuals) == n and not any(load_checkpoint(checkpoint).pending.values())
    assert {ind.status for ind in individuals} <= {Status.COMPLETED, Status.PRUNED}
    # The best completed individuals, at most --top-n 2 (ASHA lets the first run at each rung through: one
    # at least), best first, each trained to the last epoch.
    shown = min(2, sum(ind.status is Status.COMPLETED for ind in individuals))
    assert f"Best {shown} individual(s) on scikit-learn's digits:" in second, second[-3000:]
    assert len(best) == shown >= 1 and all(int(epochs) == EPOCHS for _, epochs in best), second[-3000:]
    assert [float(loss) for loss, _ in best] == sorted(float(loss) for loss, _ in best)
    begun = epochs_begun(log)
    for ind in individuals:
        ranks = begun[ind.uid]
        assert len(ranks) == 2, f"individual {ind.uid} trained on ranks {sorted(ranks)}"
        expected = list(range(ind.steps))
        for rank, epochs in ranks.items():
            # Every epoch once, in order, on each rank of the worker, up to the one the surrogate stopped.
            assert epochs == expected, (
                f"individual {ind.uid}, rank {rank}: epochs {epochs}, {ind.status.name}"
            )
        if ind.status is Status.PRUNED:
            assert ind.steps < EPOCHS
        else:
            assert ind.steps == EPOCHS
    # The first rank of each worker counts what it trained: the two jobs together trained each epoch once.
    assert trained_first + trained_second == sum(ind.steps for ind in individuals)


def checkpoint(name: str) -> list[str]:
    return ["--checkpoint", f"{{tmp}}/{name}"]


CASES: dict[str, tuple[int, list[str]]] = {}
for n in (4,):  # at 8 ranks: the tutorial, stopped and resumed (above)
    CASES[f"prune-{n}"] = (n, [*checkpoint(f"prune-{n}"), "--prune-at", "2", "--epochs", "4"])
    CASES[f"raise-{n}"] = (n, [*checkpoint(f"raise-{n}"), "--mode", "raise", "--failure-timeout", "5"])
# Epochs of 16 batches of 0.5 s: the interruption (at 9 s) finds the trainings in the middle of an epoch.
LIMITED = [
    "--generations",
    "-1",
    "--time-limit",
    "10",
    "--epochs",
    "2",
    "--batches",
    "16",
    "--batch-sleep",
    "0.5",
]
ONE_RANK = ["--ranks-per-worker", "1", "--prune-at", "2", "--epochs", "3"]
CASES["one-rank-4"] = (4, [*checkpoint("one-rank"), *ONE_RANK])
CASES["time-limit-4"] = (4, [*checkpoint("limit"), *LIMITED])
CASES["finish-4"] = (4, [*checkpoint("limit"), "--finish", "--epochs", "2", "--batches", "16"])


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Cases:
    """Every case above, in one launch per rank count."""
    pytest.importorskip("transformers")
    return Cases("hf_trainer_faults.py", CASES, tmp_path_factory.mktemp("hf_trainer"), timeout=90)


def run(cases: Cases, name: str) -> tuple[dict, Path]:
    out = cases(name)
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    directory = Path(cases.cases[name][1][1])
    return json.loads(line[len("RESULT ") :]), directory


def groups_by_rank(directory: Path) -> dict[int, list[int]]:
    """The rendezvous port of the worker's group at each evaluation, per world rank."""
    ports: dict[int, list[int]] = defaultdict(list)
    for line in (directory / "groups.txt").read_text().splitlines():
        rank, _, port = (int(x) for x in line.split())
        ports[rank].append(port)
    return ports


@pytest.mark.parametrize("n", [4])
def test_a_pruned_training_stops_on_every_rank_at_the_same_validation(cases, n):
    result, directory = run(cases, f"prune-{n}")
    workers = n // 2
    assert result["statuses"]["PRUNED"] == 2 * workers, result
    assert set(result["steps"].values()) == {2}
    begun = epochs_begun(directory / "epochs.txt")
    assert len(begun) == 2 * workers
    for uid, ranks in begun.items():
        assert len(ranks) == 2 and all(epochs == [0, 1] for epochs in ranks.values()), (uid, dict(ranks))
    # The Trainer (Accelerate) left the worker's group alone: each worker's second evaluation reused it.
    for rank, ports in groups_by_rank(directory).items():
        assert len(ports) == 2 and ports[0] == ports[1] > 0, (rank, ports)


def test_one_rank_workers_train_and_are_pruned_alone(cases):
    result, directory = run(cases, "one-rank-4")
    assert result["statuses"]["PRUNED"] == 8 and set(result["steps"].values()) == {2}, result
    begun = epochs_begun(directory / "epochs.txt")
    assert len(begun) == 8
    for uid, ranks in begun.items():
        assert len(ranks) == 1 and list(ranks.values()) == [[0, 1]], (uid, dict(ranks))


@pytest.mark.parametrize("n", [4])
def test_a_rank_raising_mid_epoch_fails_the_evaluation_and_releases_its_partner(cases, n):
    result, directory = run(cases, f"raise-{n}")
    # Released from DDP's all-reduce at once, not after failure_timeout (5 s, which would abort the job).
    assert result["statuses"]["FAILED"] == 1, result
    assert result["statuses"]["COMPLETED"] == n - 1, result
    assert max(result["elapsed"]) < 60, result["elapsed"]
    ports = groups_by_rank(directory)
    # The failed worker (world ranks 0 and 1) made a new group for its next evaluation, on both ranks.
    assert ports[0][0] == ports[1][0] and ports[0][1] == ports[1][1] and ports[0][0] != ports[0][1], ports
    for rank in range(2, n):
        assert ports[rank][0] == ports[rank][1], (rank, ports)


def test_a_time_limit_interrupts_trainings_mid_epoch_and_the_run_resumes(cases):
    result, directory = run(cases, "time-limit-4")
    # Every rank returned in time: the trainer threads, halted in the middle of an epoch, ended.
    assert max(result["elapsed"]) <= 10.0, result["elapsed"]
    assert result["pending"] == 2, result
    finished, _ = run(cases, "finish-4")
    assert finished["pending"] == 0, "every interrupted training finished on resume"
    checkpoint = load_checkpoint(directory)
    assert all(ind.status is Status.COMPLETED and ind.steps == 2 for ind in checkpoint.population)
