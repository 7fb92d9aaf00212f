"""Per-evaluation checkpoints under mpiexec: stop or kill a job mid-training, resume, lose no epoch twice.

The program (programs/evaluation_folders.py) trains a known sum over epochs with an all-reduce per epoch
(so ranks of a worker that disagreed about where to stop would hang and time out), saves its state in its
evaluation folder, and logs every epoch it begins. A stop signal ends an evaluation at its next commit, so
an interrupted and resumed run trains exactly the epochs of an uninterrupted one; a SIGKILL loses at most
the epoch under way on each worker. The final losses prove that each evaluation continued from its own
state with every interim loss counted once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from propulate import load_checkpoint

EPOCHS = 5
GENERATIONS = 3


def run(launcher, tmp_path: Path, n: int, *args: str, timeout: float = 120.0, env=None):
    ckpt = str(tmp_path / "ckpt")
    out = launcher("evaluation_folders.py", n, "--checkpoint", ckpt, *args, timeout=timeout, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(lines[0][len("RESULT ") :]) if lines else None
    if result is not None:
        result["output"] = out.stdout  # for the messages of failed assertions
    return result, out


def expected_loss(x: float, y: float, steps: int) -> float:
    return sum((x * x + y * y) / (epoch + 1) for epoch in range(steps))


def epochs_trained(tmp_path: Path) -> dict[int, list[list[int]]]:
    """Per rank, the (uid, epoch) pairs it began, in order."""
    logs = sorted((tmp_path / "ckpt").glob("epochs-*.log"))
    return {
        int(log.stem.split("-")[1]): [[int(x) for x in line.split()] for line in log.read_text().splitlines()]
        for log in logs
    }


def check_final(
    result,
    tmp_path: Path,
    workers: int,
    ranks_per_worker: int,
    plain: bool = False,
    killed: dict[int, list[list[int]]] | None = None,
):
    """Every individual completed with the loss of an uninterrupted training; folders cleaned up.

    ``killed``: the epochs each rank began in an earlier job that was killed (:func:`epochs_trained` then).
    """
    individuals = result["individuals"]
    assert len(individuals) == workers * GENERATIONS, individuals
    for uid, status, steps, loss, _island, x, y in individuals:
        error = result["errors"].get(str(uid))
        assert status == "COMPLETED", f"{uid} {status}: {error}\noutput:\n{result['output'][-6000:]}"
        assert steps == (0 if plain else EPOCHS), (uid, steps)  # a plain loss function reports no steps
        assert loss == pytest.approx(expected_loss(x, y, EPOCHS), rel=1e-12), uid
    assert result["folders"] == {}, "evaluation folders left behind"
    trained = epochs_trained(tmp_path)
    # Every rank of a worker began the same epochs of the same individuals, in the same order. A SIGKILL
    # reaches the ranks at different instants: in the killed job, one rank may have begun an epoch (logged
    # before the epoch's all-reduce) that the other never reached.
    killed = killed or {}
    for first in range(0, workers * ranks_per_worker, ranks_per_worker):
        for other in range(first + 1, first + ranks_per_worker):
            before = [killed.get(first, []), killed.get(other, [])]
            shorter, longer = sorted(before, key=len)
            lag = len(longer) - len(shorter)
            assert longer[: len(shorter)] == shorter and lag <= (1 if killed else 0), (first, other)
            assert trained[other][len(before[1]) :] == trained[first][len(before[0]) :], (first, other)
    roots = [trained[rank] for rank in range(0, workers * ranks_per_worker, ranks_per_worker)]
    return Counter(tuple(pair) for pairs in roots for pair in pairs)


@pytest.mark.parametrize(
    ("n", "ranks_per_worker", "plain"),
    [(1, 1, False), (2, 1, False), (2, 2, False), (4, 2, False), (4, 1, True), (2, 2, True)],
)
def test_a_stopped_job_resumes_its_evaluations_without_training_an_epoch_twice(
    mpirun, tmp_path, n, ranks_per_worker, plain
):
    extra = ["--ranks-per-worker", str(ranks_per_worker), *(["--plain"] if plain else [])]
    workers = n // ranks_per_worker
    first, out = run(mpirun, tmp_path, n, "--stop-at", "1:2", *extra)
    assert "SIGTERM received" in out.stdout
    checkpoint = load_checkpoint(tmp_path / "ckpt")
    pending = [ind for inds in checkpoint.pending.values() for ind in inds]
    assert pending, "the stop interrupted no evaluation"
    for ind in pending:  # each stopped at a commit, with its state in its folder
        names = first["folders"][str(ind.uid)]
        assert [name for name in names if name.startswith("step-")], names
    second, _ = run(mpirun, tmp_path, n, *extra)
    epochs = check_final(second, tmp_path, workers, ranks_per_worker, plain)
    # Exactly the epochs of an uninterrupted run: none trained twice, none skipped.
    assert max(epochs.values()) == 1, [pair for pair, count in epochs.items() if count > 1]
    assert len(epochs) == workers * GENERATIONS * EPOCHS


@pytest.mark.parametrize(("n", "ranks_per_worker"), [(2, 1), (4, 2)])
def test_a_killed_job_loses_at_most_the_epoch_under_way_per_worker(
    mpirun, mpilaunch, tmp_path, n, ranks_per_worker
):
    extra = ["--ranks-per-worker", str(ranks_per_worker)]
    workers = n // ranks_per_worker
    killed, out = run(mpilaunch, tmp_path, n, "--stop-at", "1:2", "--kill", "--epoch-seconds", "0.2", *extra)
    assert out.returncode != 0 and killed is None
    checkpoint = load_checkpoint(tmp_path / "ckpt")
    assert [ind for inds in checkpoint.pending.values() for ind in inds], (
        "no evaluation reached the checkpoint"
    )
    before = epochs_trained(tmp_path)
    second, _ = run(mpirun, tmp_path, n, *extra)
    epochs = check_final(second, tmp_path, workers, ranks_per_worker, killed=before)
    assert len(epochs) == workers * GENERATIONS * EPOCHS
    repeated = sum(count - 1 for count in epochs.values())
    assert repeated <= workers, epochs


def test_interim_losses_reach_the_surrogate_once(mpirun, tmp_path):
    """A resumed evaluation replays its reported losses to the surrogate, and reports each later one once."""
    run(mpirun, tmp_path, 2, "--stop-at", "1:2", "--surrogate", "log")
    second, _ = run(mpirun, tmp_path, 2, "--surrogate", "log")
    check_final(second, tmp_path, 2, 1)
    shown: dict[int, list[tuple[str, float]]] = {}
    for log in (tmp_path / "ckpt").glob("surrogate-*.log"):
        for line in log.read_text().splitlines():
            uid, kind, loss = line.split()
            shown.setdefault(int(uid), []).append((kind, float(loss)))
    resumed = 0
    for uid, _status, _steps, _loss, _island, x, y in second["individuals"]:
        curve = [expected_loss(x, y, steps) for steps in range(1, EPOCHS + 1)]
        cancels = [loss for kind, loss in shown[uid] if kind == "cancel"]
        replays = [loss for kind, loss in shown[uid] if kind == "replay"]
        assert cancels == pytest.approx(curve), uid  # every interim loss judged once, in order
        if replays:
            resumed += 1
            assert replays == pytest.approx(curve[: len(replays)]), uid
    assert resumed >= 1


def test_a_loss_that_starts_over_has_its_known_losses_skipped(mpirun, tmp_path):
    """A loss function that ignores its saved state starts over; its first losses are not sent again."""
    run(mpirun, tmp_path, 2, "--stop-at", "1:2", "--surrogate", "log", "--restart")
    second, _ = run(mpirun, tmp_path, 2, "--surrogate", "log", "--restart")
    check_final(second, tmp_path, 2, 1)
    for log in (tmp_path / "ckpt").glob("surrogate-*.log"):
        cancels = Counter(
            (line.split()[0], line.split()[2]) for line in log.read_text().splitlines() if " cancel " in line
        )
        assert max(cancels.values()) == 1


@pytest.mark.parametrize("keep", [1, 3])
def test_folders_of_the_best_are_kept(mpirun, tmp_path, keep):
    result, _ = run(mpirun, tmp_path, 2, "--keep", str(keep), "--generations", "4")
    best = sorted(result["individuals"], key=lambda entry: entry[3])[:keep]
    assert sorted(result["folders"]) == sorted(str(entry[0]) for entry in best)
    for names in result["folders"].values():
        assert [name for name in names if name.startswith("step-")] == [f"step-{EPOCHS:08d}.000001"], names


def test_successive_halving_resumes_with_its_rung_records(mpirun, tmp_path):
    run(mpirun, tmp_path, 4, "--stop-at", "2:2", "--surrogate", "asha", "--generations", "5")
    second, _ = run(mpirun, tmp_path, 4, "--surrogate", "asha", "--generations", "5")
    individuals = second["individuals"]
    assert len(individuals) == 4 * 5
    status = Counter(entry[1] for entry in individuals)
    assert status["PRUNED"] > 0 and status["COMPLETED"] > 0, status
    for uid, state, steps, loss, _island, x, y in individuals:
        # Rungs at 1, 2, 4 epochs; a pruned run keeps the loss of the rung that stopped it.
        assert steps in ((1, 2, 4) if state == "PRUNED" else (EPOCHS,)), (uid, state, steps)
        assert loss == pytest.approx(expected_loss(x, y, steps), rel=1e-12)
    assert second["folders"] == {}


@pytest.mark.parametrize(("n", "plain"), [(2, False), (2, True), (4, True)])
def test_a_rank_that_fails_while_its_worker_commits_fails_the_evaluation_only(mpirun, tmp_path, n, plain):
    """The failing rank's last agreement meets the first rank's commit: both end the evaluation there."""
    extra = ["--ranks-per-worker", "2", "--fail-at", "1:2", *(["--plain"] if plain else [])]
    result, _ = run(mpirun, tmp_path, n, *extra)
    individuals = result["individuals"]
    workers = n // 2
    assert len(individuals) == workers * GENERATIONS
    status = Counter(entry[1] for entry in individuals)
    assert status == {"FAILED": workers, "COMPLETED": workers * (GENERATIONS - 1)}, status
    assert result["folders"] == {}


def test_a_time_limit_stops_evaluations_at_a_commit(mpirun, tmp_path):
    """Near the time limit an evaluation stops after the step that still fits, and goes on from it."""
    extra = ["--generations", "6", "--epoch-seconds", "0.15"]
    first, _ = run(mpirun, tmp_path, 2, *extra, env={"PROPULATE_TIME_LIMIT": "4"})
    checkpoint = load_checkpoint(tmp_path / "ckpt")
    pending = [ind for inds in checkpoint.pending.values() for ind in inds]
    assert pending, "the time limit interrupted no evaluation"
    for ind in pending:
        assert any(name.startswith("step-") for name in first["folders"][str(ind.uid)])
    second, _ = run(mpirun, tmp_path, 2, *extra)
    individuals = second["individuals"]
    assert len(individuals) == 2 * 6
    trained = Counter(tuple(pair) for rank in (0, 1) for pair in epochs_trained(tmp_path)[rank])
    assert max(trained.values()) == 1 and len(trained) == 2 * 6 * EPOCHS
    for uid, status, steps, loss, _island, x, y in individuals:
        assert (status, steps) == ("COMPLETED", EPOCHS), uid
        assert loss == pytest.approx(expected_loss(x, y, EPOCHS), rel=1e-12)


def test_interrupted_evaluations_continue_on_another_layout(mpirun, tmp_path):
    """Resumed onto other workers (4 of 1 rank, 2 islands -> 1 of 2 ranks), each goes on from its state."""
    run(mpirun, tmp_path, 4, "--stop-at", "1:2", "--num-islands", "2")
    pending = [ind for inds in load_checkpoint(tmp_path / "ckpt").pending.values() for ind in inds]
    assert len(pending) >= 2, "the stop interrupted fewer evaluations than expected"
    before = epochs_trained(tmp_path)
    began = {tuple(pair) for pairs in before.values() for pair in pairs}
    second, _ = run(mpirun, tmp_path, 2, "--ranks-per-worker", "2")
    after = epochs_trained(tmp_path)
    new = [after[rank][len(before.get(rank, [])) :] for rank in (0, 1)]
    assert new[0] == new[1], "the two ranks of the worker trained different epochs"
    again = [pair for pair in new[0] if tuple(pair) in began]
    assert not again, f"epochs trained again after the resume: {again}"
    by_uid = {entry[0]: entry for entry in second["individuals"]}
    for ind in pending:
        uid, status, steps, loss, _island, x, y = by_uid[ind.uid]
        assert (status, steps) == ("COMPLETED", EPOCHS), uid
        assert loss == pytest.approx(expected_loss(x, y, EPOCHS), rel=1e-12)
    assert second["folders"] == {}
