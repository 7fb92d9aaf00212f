"""Per-evaluation checkpoints on one process: the folders, the evaluator's commits and resumes, a stopped run.

The end-to-end runs under mpiexec (several workers, multi-rank workers, SIGKILL, time limits) are in
``tests/mpi/test_evaluation_folders.py``; here each piece is checked on its own, without mpiexec: the
:class:`EvaluationFolders` on disk, an :class:`Evaluator` on ``MPI.COMM_SELF`` driven through interrupted and
resumed attempts, and one serial :class:`Propulator` stopped by SIGTERM and resumed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mpi4py import MPI

import propulate
from propulate import Individual, Islands, Propulator, Status, load_checkpoint
from propulate.checkpoint import evaluations
from propulate.checkpoint.evaluations import (
    EvaluationFolders,
    Resume,
    committed,
    evaluation_checkpoint,
    sweep,
)
from propulate.checkpoint.session import archive
from propulate.evaluation import NO_HOOKS, Evaluation, EvaluationHooks, Evaluator
from propulate.surrogate import Surrogate
from propulate.utils import get_default_propagator

LIMITS = {"x": (0.0, 1.0)}
EPOCHS = 5


def individual(uid: int = 1, x: float = 0.5) -> Individual:
    ind = Individual({"x": x}, LIMITS)
    ind.uid = uid
    return ind


def running_sum(x: float, steps: int) -> float:
    """The state of :class:`Training` after ``steps`` epochs, which is also its interim loss then."""
    return sum(x / (epoch + 1) for epoch in range(steps))


def step_names(folder: Path) -> list[str]:
    """The committed states in ``folder`` by their step, ``step-<k>`` (without the commit number)."""
    return sorted(name.split(".")[0] for name in os.listdir(folder) if name.startswith("step-"))


def interim_losses(folder: Path) -> list[float]:
    return [entry["loss"] for entry in json.loads((folder / "interim.json").read_text())]


def state(folder: Path) -> dict[str, Any]:
    """The state committed last in ``folder``."""
    (name,) = (name for name in os.listdir(folder) if name.startswith("step-"))
    return json.loads((folder / name / "state.json").read_text())


class Training:
    """A generator loss function: epoch ``e`` adds ``x / (e + 1)`` to a sum ``w``, saves it, yields ``w``.

    Parameters
    ----------
    restore : bool
        Whether it continues from :attr:`EvaluationCheckpoint.latest` (else it starts over every attempt).
    offset : float
        Added to every loss it yields (not to its state), to tell an attempt's losses from another's.
    unsaved : set of int
        Epochs after which it saves nothing.
    stop_at : int, optional
        The epoch in which a stop arrives (:attr:`stopping` becomes true, as a SIGTERM would make it).

    Attributes
    ----------
    trained : list of int
        The epochs it began, over all attempts.
    seen : list of (list of str, list of float)
        After each yield that the library followed by another ``next``: the committed step folders and the
        interim losses in ``interim.json``.
    """

    def __init__(
        self,
        restore: bool = True,
        offset: float = 0.0,
        unsaved: frozenset[int] = frozenset(),
        stop_at: int = -1,
    ) -> None:
        self.restore = restore
        self.offset = offset
        self.unsaved = unsaved
        self.stop_at = stop_at
        self.stopping = False
        self.trained: list[int] = []
        self.seen: list[tuple[list[str], list[float]]] = []

    def stop_soon(self, seconds: float) -> bool:
        return self.stopping

    def __call__(self, ind: Individual) -> Iterator[dict[str, float]]:
        checkpoint = evaluation_checkpoint()
        start, w = 0, 0.0
        if self.restore and checkpoint.latest is not None:
            saved = json.loads((checkpoint.latest / "state.json").read_text())
            start, w = saved["epoch"], saved["w"]
            assert start == checkpoint.step
        for epoch in range(start, EPOCHS):
            self.trained.append(epoch)
            w += ind["x"] / (epoch + 1)
            if epoch not in self.unsaved:
                (checkpoint.path / "state.json").write_text(json.dumps({"epoch": epoch + 1, "w": w}))
            if epoch == self.stop_at:
                self.stopping = True
            yield {"loss": w + self.offset, "epoch": float(epoch + 1)}
            self.seen.append((step_names(checkpoint.folder), interim_losses(checkpoint.folder)))


class Recording(Surrogate):
    """Never cancels; records every call it gets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def start_run(self, ind: Individual) -> None:
        self.calls.append(("start_run", ind.uid))

    def replay(self, loss: float) -> None:
        self.calls.append(("replay", loss))

    def cancel(self, loss: float) -> bool:
        self.calls.append(("cancel", loss))
        return False


@pytest.fixture
def make_evaluator(tmp_path: Path) -> Iterator[Callable[..., Evaluator]]:
    """Build one-rank evaluators whose evaluation folders are in ``tmp_path``; frees their communicators."""
    comms: list[MPI.Comm] = []

    def make(
        loss_fn: Callable[..., Any],
        surrogate: Surrogate | None = None,
        stop_soon: Callable[[float], bool] | None = None,
        keep_best: int = 0,
    ) -> Evaluator:
        comms.append(MPI.COMM_SELF.Dup())
        hooks = NO_HOOKS if stop_soon is None else EvaluationHooks(stop_soon=stop_soon)
        folders = EvaluationFolders(tmp_path, root=True, keep_best=keep_best)
        return Evaluator(loss_fn, MPI.COMM_SELF, comms[-1], surrogate=surrogate, hooks=hooks, folders=folders)

    yield make
    for comm in comms:
        comm.Free()


def attempt(evaluator: Evaluator, ind: Individual, redo: bool) -> Evaluation:
    """Evaluate ``ind`` as the run does: read what an earlier attempt left, if it is evaluated again."""
    assert evaluator.folders is not None
    return evaluator(ind, evaluator.folders.prepare(ind, redo))


def conclude(
    folders: EvaluationFolders, ind: Individual, outcome: Evaluation, island: list[Individual]
) -> None:
    """Take the outcome into ``ind`` and let the folders keep or remove its folder, as the run does."""
    ind.loss, ind.status, ind.steps = outcome.loss, outcome.status, outcome.steps
    folders.finish(
        ind,
        completed=outcome.status is Status.COMPLETED,
        interrupted=outcome.status is Status.INTERRUPTED,
        island=[*island, ind],
    )


@pytest.fixture
def propulate_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> pytest.LogCaptureFixture:
    """Capture the library's log even when an earlier test's logger configuration stopped propagation."""
    logger = logging.getLogger("propulate")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, caplog.handler])
    caplog.set_level(logging.WARNING, logger="propulate")
    return caplog


# ------------------------------------------------------------------------------- evaluation_checkpoint()


def test_outside_a_run_a_loss_function_gets_temporary_folders_that_never_resume(
    tmp_path, monkeypatch
) -> None:
    """A loss function called by hand (to try it out) runs unchanged, in folders of its own."""
    monkeypatch.chdir(tmp_path)
    checkpoint = evaluation_checkpoint()
    assert checkpoint.path.is_dir()
    assert not checkpoint.path.is_relative_to(tmp_path), "nothing is written where the script runs"
    assert (checkpoint.latest, checkpoint.step, checkpoint.reported, checkpoint.resuming) == (
        None,
        0,
        0,
        False,
    )
    checkpoint.commit()  # nothing saved: nothing committed
    assert checkpoint.latest is None
    (checkpoint.path / "state.json").write_text("{}")
    checkpoint.commit()
    assert checkpoint.latest is not None and (checkpoint.latest / "state.json").is_file()
    assert os.listdir(checkpoint.path) == []
    again = evaluation_checkpoint()
    assert again.folder != checkpoint.folder and again.latest is None, "each call by hand starts afresh"
    assert os.listdir(tmp_path) == []


def test_a_first_attempt_gets_a_fresh_folder_of_its_own(make_evaluator, tmp_path) -> None:
    seen: dict[str, Any] = {}

    def loss_fn(ind: Individual) -> float:
        checkpoint = propulate.evaluation_checkpoint()
        seen.update(
            uid=checkpoint.uid,
            path=checkpoint.path,
            is_dir=checkpoint.path.is_dir(),
            latest=checkpoint.latest,
            step=checkpoint.step,
            reported=checkpoint.reported,
            resuming=checkpoint.resuming,
        )
        return 1.0

    outcome = attempt(make_evaluator(loss_fn), individual(uid=7), redo=False)
    assert outcome.status is Status.COMPLETED
    folder = tmp_path / "evaluations" / "7"
    assert seen == {
        "uid": 7,
        "path": folder / "pending",
        "is_dir": True,
        "latest": None,
        "step": 0,
        "reported": 0,
        "resuming": False,
    }
    after = evaluation_checkpoint()  # the evaluation is over: a call by hand gets folders of its own
    assert after.uid == -1 and not after.folder.is_relative_to(tmp_path)


def test_a_loss_function_that_never_asks_costs_no_folder(make_evaluator, tmp_path) -> None:
    outcome = attempt(make_evaluator(lambda ind: 2.0), individual(), redo=False)
    assert (outcome.status, outcome.loss) == (Status.COMPLETED, 2.0)
    assert not (tmp_path / "evaluations").exists()


# ------------------------------------------------------------------------------ commits of a generator


def test_each_interim_loss_commits_the_state_saved_for_it(make_evaluator, tmp_path) -> None:
    training = Training()
    evaluator = make_evaluator(training)
    ind = individual(uid=3, x=0.6)
    outcome = attempt(evaluator, ind, redo=False)
    assert (outcome.status, outcome.steps) == (Status.COMPLETED, EPOCHS)
    assert outcome.loss == pytest.approx(running_sum(0.6, EPOCHS))
    assert outcome.metrics == {"epoch": float(EPOCHS)}
    curve = [running_sum(0.6, k) for k in range(1, EPOCHS + 1)]
    # After interim loss k: the state of step k only, and the k losses so far.
    assert training.seen == [([f"step-{k:08d}"], curve[:k]) for k in range(1, EPOCHS + 1)]
    folder = tmp_path / "evaluations" / "3"
    assert state(folder) == {"epoch": EPOCHS, "w": pytest.approx(curve[-1])}
    entries = json.loads((folder / "interim.json").read_text())
    assert [entry["metrics"] for entry in entries] == [{"epoch": float(k)} for k in range(1, EPOCHS + 1)]
    assert os.listdir(folder / "pending") == []  # emptied for the next step
    conclude(evaluator.folders, ind, outcome, [])
    assert not folder.exists(), "a completed evaluation's folder is removed without keep_best"


def test_a_step_that_saved_nothing_commits_nothing(make_evaluator, tmp_path) -> None:
    training = Training(unsaved=frozenset({2, 3}))
    outcome = attempt(make_evaluator(training), individual(x=0.4), redo=False)
    assert outcome.status is Status.COMPLETED
    steps = [names for names, _ in training.seen]
    # Epochs 2 and 3 (steps 3 and 4) saved nothing: step 2 stays the latest until step 5 commits.
    assert steps == [
        ["step-00000001"],
        ["step-00000002"],
        ["step-00000002"],
        ["step-00000002"],
        ["step-00000005"],
    ]
    # Their losses are recorded all the same.
    assert [len(losses) for _, losses in training.seen] == [1, 2, 3, 4, 5]


def test_a_failed_or_pruned_evaluation_has_its_folder_removed(make_evaluator, tmp_path) -> None:
    def failing(ind: Individual) -> Iterator[float]:
        checkpoint = evaluation_checkpoint()
        (checkpoint.path / "state.json").write_text("{}")
        yield 1.0
        raise ValueError("diverged")

    evaluator = make_evaluator(failing)
    ind = individual(uid=4)
    outcome = attempt(evaluator, ind, redo=False)
    assert outcome.status is Status.FAILED
    assert step_names(tmp_path / "evaluations" / "4") == ["step-00000001"]
    conclude(evaluator.folders, ind, outcome, [])
    assert not (tmp_path / "evaluations" / "4").exists()


# --------------------------------------------------------------------------------------------- prepare


def interrupted(make_evaluator, ind: Individual, stop_at: int, **kwargs: Any) -> Training:
    """Evaluate ``ind`` with :class:`Training` until a stop arrives in epoch ``stop_at``."""
    training = Training(stop_at=stop_at, **kwargs)
    outcome = attempt(make_evaluator(training, stop_soon=training.stop_soon), ind, redo=False)
    assert (outcome.status, outcome.steps) == (Status.INTERRUPTED, stop_at + 1)
    return training


def test_prepare_reads_what_an_interrupted_attempt_left(make_evaluator, tmp_path) -> None:
    ind = individual(uid=5, x=0.8)
    interrupted(make_evaluator, ind, stop_at=2)
    resume = EvaluationFolders(tmp_path, root=True).prepare(ind, redo=True)
    assert resume is not None
    assert resume.step == 3
    assert resume.interim == [(pytest.approx(running_sum(0.8, k)), {"epoch": float(k)}) for k in range(1, 4)]


def test_the_half_saved_state_is_gone_before_the_other_ranks_hear_of_the_evaluation(tmp_path) -> None:
    """The root prepares, then sends the task: a sub-rank may save into ``pending`` before the root begins.

    So the interrupted attempt's half-saved state is gone by then, and the root's ``begin`` removes nothing a
    sub-rank saved (nor the folder under a sub-rank's ``mkdir(exist_ok=True)``, which raises
    ``FileExistsError`` when the folder vanishes between its two looks).
    """
    folder = tmp_path / "evaluations" / "5"
    (folder / "step-00000001.000001").mkdir(parents=True)
    (folder / "interim.json").write_text('[{"loss": 1.0, "metrics": {}}]')
    (folder / "pending").mkdir()
    (folder / "pending" / "half-saved").write_text("of the interrupted attempt")
    root, sub = EvaluationFolders(tmp_path, root=True), EvaluationFolders(tmp_path, root=False)
    ind = individual(uid=5)
    resume = root.prepare(ind, redo=True)
    assert resume is not None and resume.step == 1
    assert not (folder / "pending").exists(), "removed before the task goes to the other ranks"
    sub.begin(ind.uid, resume, lambda: None)  # the sub-rank's loss function saves its shard first
    (evaluation_checkpoint().path / "shard-1").write_text("saved by the sub-rank")
    sub.end()
    root.begin(ind.uid, resume, lambda: None)
    checkpoint = evaluation_checkpoint()
    root.end()
    assert os.listdir(checkpoint.path) == ["shard-1"]
    assert checkpoint.latest == folder / "step-00000001.000001"


def test_a_first_evaluation_does_not_look_at_the_disk(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "evaluations" / "5"
    (folder / "step-00000001.000001").mkdir(parents=True)
    (folder / "interim.json").write_text('[{"loss": 1.0, "metrics": {}}]')

    def no_disk(*args: Any) -> None:
        raise AssertionError("the disk was read")

    for name in ("is_dir", "exists", "read_text", "iterdir"):
        monkeypatch.setattr(Path, name, no_disk)
    monkeypatch.setattr(evaluations.os, "listdir", no_disk)
    monkeypatch.setattr(evaluations.os, "scandir", no_disk)
    assert EvaluationFolders(tmp_path, root=True).prepare(individual(uid=5), redo=False) is None


def test_prepare_of_an_individual_without_a_folder_is_a_first_attempt(tmp_path) -> None:
    assert EvaluationFolders(tmp_path, root=True).prepare(individual(uid=9), redo=True) is None


def test_a_state_newer_than_the_recorded_losses_is_ignored(tmp_path) -> None:
    """A crash between a new step's rename and its interim.json cannot happen; a stray step is not trusted."""
    folder = tmp_path / "evaluations" / "6"
    for step in (2, 4):
        (folder / f"step-{step:08d}.000001").mkdir(parents=True)
    (folder / "interim.json").write_text(json.dumps([{"loss": float(k), "metrics": {}} for k in range(3)]))
    resume = EvaluationFolders(tmp_path, root=True).prepare(individual(uid=6), redo=True)
    assert resume == Resume([(0.0, {}), (1.0, {}), (2.0, {})], 2, "step-00000002.000001")


@pytest.mark.parametrize(
    "text", ["[{not json", '[{"loss": 1.0}]', '{"loss": 1.0}', "null", '[{"loss": "a"}]']
)
def test_an_unreadable_interim_file_gives_no_losses_and_a_warning(tmp_path, propulate_log, text) -> None:
    folder = tmp_path / "evaluations" / "8"
    (folder / "step-00000001.000001").mkdir(parents=True)
    (folder / "step-00000000.000001").mkdir()
    (folder / "interim.json").write_text(text)
    resume = EvaluationFolders(tmp_path, root=True).prepare(individual(uid=8), redo=True)
    # Without losses, only a state taken before the first interim loss can be trusted.
    assert resume == Resume([], 0, "step-00000000.000001")
    assert "interim.json is unreadable" in propulate_log.text
    assert str(folder) in propulate_log.text


# --------------------------------------------------------------------------------------------- resume


def test_a_resumed_attempt_that_reads_latest_continues_from_its_step(make_evaluator, tmp_path) -> None:
    ind = individual(uid=10, x=0.3)
    first = interrupted(make_evaluator, ind, stop_at=1)
    assert first.trained == [0, 1]
    training = Training()
    surrogate = Recording()
    outcome = attempt(make_evaluator(training, surrogate), ind, redo=True)
    assert training.trained == [2, 3, 4]  # no epoch trained twice
    assert (outcome.status, outcome.steps) == (Status.COMPLETED, EPOCHS)
    assert outcome.loss == pytest.approx(running_sum(0.3, EPOCHS))
    curve = [running_sum(0.3, k) for k in range(1, EPOCHS + 1)]
    # Its first interim loss is that of step 3.
    assert training.seen[0] == (["step-00000003"], pytest.approx(curve[:3]))
    assert surrogate.calls == [
        ("start_run", 10),
        *[("replay", pytest.approx(loss)) for loss in curve[:2]],
        *[("cancel", pytest.approx(loss)) for loss in curve[2:]],
    ]


def test_a_resumed_attempt_that_starts_over_keeps_the_losses_reported_first(make_evaluator, tmp_path) -> None:
    ind = individual(uid=11, x=0.7)
    interrupted(make_evaluator, ind, stop_at=2)
    training = Training(restore=False, offset=10.0)  # its losses differ from the first attempt's
    surrogate = Recording()
    outcome = attempt(make_evaluator(training, surrogate), ind, redo=True)
    assert training.trained == list(range(EPOCHS))
    assert (outcome.status, outcome.steps) == (Status.COMPLETED, EPOCHS)
    assert outcome.loss == pytest.approx(running_sum(0.7, EPOCHS) + 10.0)
    first = [running_sum(0.7, k) for k in range(1, 4)]
    later = [running_sum(0.7, k) + 10.0 for k in range(4, EPOCHS + 1)]
    # Reported losses stand; they are replayed to the surrogate, never judged again.
    assert surrogate.calls == [
        ("start_run", 11),
        *[("replay", pytest.approx(loss)) for loss in first],
        *[("cancel", pytest.approx(loss)) for loss in later],
    ]
    assert interim_losses(tmp_path / "evaluations" / "11") == pytest.approx(first + later)


def test_a_known_loss_is_the_one_that_counts_when_the_attempt_ends_there(make_evaluator, tmp_path) -> None:
    ind = individual(uid=12, x=0.5)
    interrupted(make_evaluator, ind, stop_at=3)
    training = Training(restore=False, offset=10.0, stop_at=1)  # stopped again within the known steps
    outcome = attempt(make_evaluator(training, stop_soon=training.stop_soon), ind, redo=True)
    assert (outcome.status, outcome.steps) == (Status.INTERRUPTED, 2)
    assert outcome.loss == pytest.approx(running_sum(0.5, 2))
    assert outcome.metrics == {"epoch": 2.0}
    folder = tmp_path / "evaluations" / "12"
    # The state of step 2 is committed; the four losses reported first stay recorded.
    assert state(folder) == {"epoch": 2, "w": pytest.approx(running_sum(0.5, 2))}
    assert interim_losses(folder) == pytest.approx([running_sum(0.5, k) for k in range(1, 5)])


def test_a_cancel_wins_over_a_stop(make_evaluator, tmp_path) -> None:
    class CancelAtThird(Recording):
        def cancel(self, loss: float) -> bool:
            super().cancel(loss)
            return len(self.calls) == 4

    training = Training(stop_at=2)
    evaluator = make_evaluator(training, CancelAtThird(), stop_soon=training.stop_soon)
    ind = individual(uid=15)
    outcome = attempt(evaluator, ind, redo=False)
    assert (outcome.status, outcome.steps) == (Status.PRUNED, 3)
    conclude(evaluator.folders, ind, outcome, [])
    assert not (tmp_path / "evaluations" / "15").exists()


def test_a_resumed_generator_with_nothing_left_completes_with_the_last_reported_loss(
    make_evaluator, tmp_path
) -> None:
    ind = individual(uid=13, x=0.9)
    interrupted(make_evaluator, ind, stop_at=EPOCHS - 1)  # stopped at its last commit
    training = Training()
    surrogate = Recording()
    outcome = attempt(make_evaluator(training, surrogate), ind, redo=True)
    assert training.trained == []
    assert (outcome.status, outcome.steps) == (Status.COMPLETED, EPOCHS)
    assert outcome.loss == pytest.approx(running_sum(0.9, EPOCHS))
    assert outcome.metrics == {"epoch": float(EPOCHS)}
    assert [kind for kind, _ in surrogate.calls] == ["start_run", *["replay"] * EPOCHS]


def test_a_resumed_checkpoint_says_what_was_reported(make_evaluator) -> None:
    ind = individual(uid=14)
    interrupted(make_evaluator, ind, stop_at=1)
    seen: dict[str, Any] = {}

    def peek(ind: Individual) -> Iterator[dict[str, float]]:
        checkpoint = evaluation_checkpoint()
        seen.update(reported=checkpoint.reported, resuming=checkpoint.resuming, step=checkpoint.step)
        seen["pending"] = os.listdir(checkpoint.path)
        seen["latest"] = checkpoint.latest
        yield from Training()(ind)

    attempt(make_evaluator(peek), ind, redo=True)
    assert seen["reported"] == 2 and seen["resuming"] is True and seen["step"] == 2
    assert seen["latest"] is not None and seen["latest"].name == "step-00000002.000001"
    assert seen["pending"] == [], "a half-saved state of the interrupted attempt is dropped"


# ---------------------------------------------------------------------------------------- stop_soon


def test_a_generator_that_commits_stops_at_its_commit(make_evaluator, tmp_path) -> None:
    closed: list[bool] = []
    training = Training(stop_at=2)

    def loss_fn(ind: Individual) -> Iterator[dict[str, float]]:
        try:
            yield from training(ind)
        finally:
            closed.append(True)

    outcome = attempt(
        make_evaluator(loss_fn, stop_soon=training.stop_soon), individual(uid=20, x=0.5), redo=False
    )
    assert (outcome.status, outcome.steps) == (Status.INTERRUPTED, 3)
    assert training.trained == [0, 1, 2] and closed == [True]
    folder = tmp_path / "evaluations" / "20"
    assert state(folder) == {"epoch": 3, "w": pytest.approx(running_sum(0.5, 3))}
    assert interim_losses(folder) == pytest.approx([running_sum(0.5, k) for k in (1, 2, 3)])


def test_a_generator_that_never_asked_for_its_folder_is_not_stopped(make_evaluator, tmp_path) -> None:
    def loss_fn(ind: Individual) -> Iterator[float]:
        for epoch in range(EPOCHS):
            yield float(epoch)

    outcome = attempt(make_evaluator(loss_fn, stop_soon=lambda seconds: True), individual(), redo=False)
    assert (outcome.status, outcome.steps, outcome.loss) == (Status.COMPLETED, EPOCHS, EPOCHS - 1.0)
    assert not (tmp_path / "evaluations").exists()


def test_the_seconds_of_the_last_step_reach_stop_soon(make_evaluator) -> None:
    asked: list[float] = []

    def stop_soon(seconds: float) -> bool:
        asked.append(seconds)
        return False

    outcome = attempt(make_evaluator(Training(), stop_soon=stop_soon), individual(), redo=False)
    assert outcome.status is Status.COMPLETED
    assert len(asked) == EPOCHS and all(0.0 <= seconds < 5.0 for seconds in asked)


def test_a_plain_loss_is_stopped_out_of_its_commit(make_evaluator, tmp_path) -> None:
    after: list[str] = []

    def loss_fn(ind: Individual) -> float:
        checkpoint = evaluation_checkpoint()
        (checkpoint.path / "state.json").write_text('{"epoch": 1}')
        try:
            checkpoint.commit()
            after.append("commit returned")
        except Exception:  # the stop is not an Exception a loss function could swallow
            after.append("caught")
        finally:
            after.append("finally")
        return 1.0

    outcome = attempt(make_evaluator(loss_fn, stop_soon=lambda seconds: True), individual(uid=21), redo=False)
    assert outcome.status is Status.INTERRUPTED
    assert after == ["finally"]
    folder = tmp_path / "evaluations" / "21"
    assert step_names(folder) == ["step-00000000"]
    assert state(folder) == {"epoch": 1}
    resume = EvaluationFolders(tmp_path, root=True).prepare(individual(uid=21), redo=True)
    assert resume == Resume([], 0, "step-00000000.000001"), "a plain loss function's state is that of step 0"


def test_a_commit_with_nothing_saved_commits_nothing(make_evaluator, tmp_path) -> None:
    latest: list[Any] = []

    def loss_fn(ind: Individual) -> float:
        checkpoint = evaluation_checkpoint()
        checkpoint.commit()
        latest.append(checkpoint.latest)
        (checkpoint.path / "state.json").write_text("{}")
        checkpoint.commit()
        latest.append(checkpoint.latest)
        checkpoint.commit()  # nothing new since: the state stays
        latest.append(checkpoint.latest)
        return 3.0

    outcome = attempt(make_evaluator(loss_fn), individual(uid=22), redo=False)
    assert (outcome.status, outcome.loss) == (Status.COMPLETED, 3.0)
    folder = tmp_path / "evaluations" / "22"
    assert latest == [None, folder / "step-00000000.000001", folder / "step-00000000.000001"]
    assert (folder / "step-00000000.000001" / "state.json").is_file()


def test_a_stop_at_a_commit_with_nothing_saved_interrupts_without_a_state(make_evaluator, tmp_path) -> None:
    def loss_fn(ind: Individual) -> float:
        evaluation_checkpoint().commit()
        return 3.0

    outcome = attempt(make_evaluator(loss_fn, stop_soon=lambda seconds: True), individual(uid=23), redo=False)
    assert outcome.status is Status.INTERRUPTED
    assert step_names(tmp_path / "evaluations" / "23") == []


def test_a_commit_after_the_evaluation_is_refused(make_evaluator) -> None:
    kept: list[Any] = []

    def loss_fn(ind: Individual) -> float:
        kept.append(evaluation_checkpoint())
        return 1.0

    attempt(make_evaluator(loss_fn), individual(), redo=False)
    with pytest.raises(RuntimeError, match="evaluation is over"):
        kept[0].commit()


# ------------------------------------------------------------------------------------- keep_best, sweep


def evaluated(
    folders: EvaluationFolders, uid: int, loss: float, status: Status, island: list[Individual]
) -> Path:
    """Let ``uid`` commit a state, end with ``loss`` and ``status``, and join ``island``; its folder."""
    folders.begin(uid, None, lambda: None)
    checkpoint = evaluation_checkpoint()
    (checkpoint.path / "state.json").write_text("{}")
    assert folders.commit(1)
    (checkpoint.path / "half-saved").write_text("")
    folders.end()
    ind = individual(uid=uid, x=uid / 100)
    conclude(folders, ind, Evaluation(loss, status, steps=1), island)
    island.append(ind)
    return folders.folder(uid)


def test_the_best_completed_keep_their_folders(tmp_path) -> None:
    folders = EvaluationFolders(tmp_path, root=True, keep_best=2)
    island: list[Individual] = []

    def left() -> list[int]:
        return sorted(int(name) for name in os.listdir(tmp_path / "evaluations"))

    evaluated(folders, 1, 3.0, Status.COMPLETED, island)
    evaluated(folders, 2, 1.0, Status.COMPLETED, island)
    assert left() == [1, 2]
    assert os.listdir(folders.folder(1)) == ["step-00000001.000001"], (
        "a kept folder holds its committed state only"
    )
    evaluated(folders, 3, 2.0, Status.COMPLETED, island)
    assert left() == [2, 3]  # 1 fell out
    evaluated(folders, 4, 2.0, Status.COMPLETED, island)
    assert left() == [2, 3, 4]  # a tie with the last of the best is kept
    evaluated(folders, 5, 0.5, Status.PRUNED, island)  # an interim loss is no final loss
    evaluated(folders, 6, math.nan, Status.FAILED, island)
    assert left() == [2, 3, 4]
    evaluated(folders, 7, math.nan, Status.INTERRUPTED, island)
    assert left() == [2, 3, 4, 7], "an interrupted evaluation keeps its folder for the next attempt"
    assert (folders.folder(7) / "pending" / "half-saved").exists()
    evaluated(folders, 8, 1.5, Status.COMPLETED, island)
    assert left() == [2, 7, 8]
    # At the end of the run, the run's best decide: this worker's kept folders fall out.
    better = [individual(uid=100 + k, x=k / 10) for k in range(2)]
    for k, ind in enumerate(better):
        ind.loss, ind.status = 0.1 * k, Status.COMPLETED
    folders.settle(better)
    assert left() == [7]


def test_with_fewer_completed_than_keep_best_every_one_is_kept(tmp_path) -> None:
    folders = EvaluationFolders(tmp_path, root=True, keep_best=3)
    island: list[Individual] = []
    for uid, loss in ((1, 5.0), (2, 1.0)):
        evaluated(folders, uid, loss, Status.COMPLETED, island)
    folders.settle(island)
    assert sorted(os.listdir(tmp_path / "evaluations")) == ["1", "2"]


def completed(uid: int, loss: float, status: Status = Status.COMPLETED) -> Individual:
    ind = individual(uid=uid, x=uid / 100)
    ind.loss, ind.status = loss, status
    return ind


def test_sweep_keeps_the_requeued_and_the_best_and_removes_the_rest(tmp_path) -> None:
    base = tmp_path / "evaluations"
    for uid in range(1, 7):
        (base / str(uid) / "step-00000001.000001").mkdir(parents=True)
    (base / "notes.txt").write_text("mine")
    individuals = [
        completed(2, 1.0),
        completed(3, 2.0),
        completed(4, 2.0),  # a tie with the last of the best
        completed(5, 3.0),
        completed(6, 0.1, Status.PRUNED),
    ]
    assert sweep(tmp_path, [1], individuals, keep_best=2) == 2
    assert sorted(os.listdir(base)) == ["1", "2", "3", "4", "notes.txt"]
    assert sweep(tmp_path, [], individuals, keep_best=0) == 4
    assert os.listdir(base) == ["notes.txt"]


def test_sweep_keeps_every_completed_one_when_fewer_than_keep_best(tmp_path) -> None:
    base = tmp_path / "evaluations"
    for uid in (1, 2, 3):
        (base / str(uid)).mkdir(parents=True)
    individuals = [completed(1, 1.0), completed(2, 9.0), completed(3, 0.0, Status.FAILED)]
    assert sweep(tmp_path, [], individuals, keep_best=5) == 1
    assert sorted(os.listdir(base)) == ["1", "2"]


def test_sweep_without_evaluation_folders_removes_nothing(tmp_path) -> None:
    assert sweep(tmp_path, [1], [completed(1, 1.0)], keep_best=1) == 0


def test_a_fresh_start_archives_the_evaluation_folders(tmp_path) -> None:
    (tmp_path / "evaluations" / "7" / "step-00000002").mkdir(parents=True)
    (tmp_path / "evaluations" / "7" / "step-00000002" / "state.json").write_text("{}")
    archive(tmp_path)
    assert not (tmp_path / "evaluations").exists()
    (previous,) = tmp_path.glob("previous-*")
    assert (previous / "evaluations" / "7" / "step-00000002" / "state.json").read_text() == "{}"


# ------------------------------------------------------------------------------------ the public boundary


@pytest.mark.parametrize("bad", [-1, 101, True, 1.5])
@pytest.mark.parametrize("kind", ["Propulator", "Islands"])
def test_keep_best_folders_is_checked(tmp_path, kind, bad) -> None:
    propagator = get_default_propagator(2, LIMITS, rng=random.Random(1))
    with pytest.raises(ValueError, match=r"keep_best_folders: expected an int in \[0, 100\]"):
        if kind == "Propulator":
            Propulator(
                lambda ind: ind["x"],
                propagator,
                random.Random(2),
                island_comm=MPI.COMM_SELF,
                propulate_comm=MPI.COMM_SELF,
                generations=0,
                checkpoint_path=tmp_path,
                keep_best_folders=bad,
            )
        else:
            Islands(
                lambda ind: ind["x"],
                propagator,
                generations=0,
                checkpoint_path=tmp_path,
                keep_best_folders=bad,
            )


# ------------------------------------------------------------------------------- a stopped serial run


def test_a_run_stopped_by_sigterm_continues_its_evaluation_from_its_state(
    tmp_path, monkeypatch, propulate_log
) -> None:
    for name in ("PROPULATE_TIME_LIMIT", "PROPULATE_RESUME", "PROPULATE_GRACE_PERIOD", "SLURM_JOB_END_TIME"):
        monkeypatch.delenv(name, raising=False)
    stop_in = 2
    trained: list[tuple[int, int]] = []  # (uid, epoch) begun

    def loss_fn(ind: Individual) -> Iterator[float]:
        checkpoint = propulate.evaluation_checkpoint()
        start, w = 0, 0.0
        if checkpoint.latest is not None:
            saved = json.loads((checkpoint.latest / "state.json").read_text())
            start, w = saved["epoch"], saved["w"]
        for epoch in range(start, EPOCHS):
            trained.append((checkpoint.uid, epoch))
            w += ind["x"] / (epoch + 1)
            (checkpoint.path / "state.json").write_text(json.dumps({"epoch": epoch + 1, "w": w}))
            if epoch == stop_in and len(trained) == stop_in + 1:
                os.kill(os.getpid(), signal.SIGTERM)  # as scancel would, in the middle of an epoch
            yield w

    def run() -> Propulator:
        propulator = Propulator(
            loss_fn,
            get_default_propagator(2, LIMITS, rng=random.Random(1)),
            random.Random(2),
            island_comm=MPI.COMM_SELF,
            propulate_comm=MPI.COMM_SELF,
            worker_sub_comm=MPI.COMM_SELF,
            generations=1,
            checkpoint_path=tmp_path,
            grace_period=30.0,  # far beyond the test: it must stop at the commit, not at the grace's end
        )
        propulator.propulate(debug=0)
        return propulator

    first = run()
    assert [epoch for _, epoch in trained] == [0, 1, 2]
    assert first.population == []
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint is not None
    (pending,) = [ind for inds in checkpoint.pending.values() for ind in inds]
    folder = tmp_path / "evaluations" / str(pending.uid)
    assert state(folder) == {"epoch": 3, "w": pytest.approx(running_sum(pending["x"], 3))}
    trained.clear()
    propulate_log.clear()
    propulate_log.set_level(logging.INFO, logger="propulate")
    second = run()
    assert trained == [(pending.uid, epoch) for epoch in range(3, EPOCHS)]
    # The counters hold the interrupted evaluation already; it is still to be finished, not "nothing".
    assert "1 interrupted evaluation(s) to redo" in propulate_log.text
    assert "nothing left to do" not in propulate_log.text
    (ind,) = second.population
    assert (ind.uid, ind.status, ind.steps) == (pending.uid, Status.COMPLETED, EPOCHS)
    assert ind.loss == pytest.approx(running_sum(pending["x"], EPOCHS))
    assert os.listdir(tmp_path / "evaluations") == []


# ------------------------------------------------------------------------------------- regressions


def test_a_commit_before_the_first_interim_loss_keeps_the_step_it_continues_from(make_evaluator) -> None:
    """A resumed generator that commits before it yields commits the state of the step it continues from."""

    def loss_fn(ind: Individual) -> Iterator[float]:
        checkpoint = evaluation_checkpoint()
        start = 0
        if checkpoint.latest is not None:
            start = json.loads((checkpoint.latest / "state.json").read_text())["epoch"]
            (checkpoint.path / "state.json").write_text(json.dumps({"epoch": start}))
            checkpoint.commit()  # before this attempt's first interim loss
        for epoch in range(start, EPOCHS):
            (checkpoint.path / "state.json").write_text(json.dumps({"epoch": epoch + 1}))
            yield float(epoch + 1)

    ind = individual(uid=31)
    made: list[Evaluator] = []
    first = make_evaluator(
        loss_fn, stop_soon=lambda seconds: made[0]._run is not None and made[0]._run.steps >= 3
    )
    made.append(first)
    assert attempt(first, ind, redo=False).status is Status.INTERRUPTED
    outcome = attempt(make_evaluator(loss_fn), ind, redo=True)
    assert (outcome.status, outcome.steps, outcome.loss) == (Status.COMPLETED, EPOCHS, float(EPOCHS))


def test_a_crash_during_a_commit_leaves_the_previous_state(tmp_path, monkeypatch) -> None:
    """A commit never removes or overwrites the latest state before the new one is in place."""
    folders = EvaluationFolders(tmp_path, root=True)
    folders.begin(1, None, lambda: None)
    checkpoint = folders.checkpoint()
    checkpoint.path.mkdir(parents=True)
    (checkpoint.path / "state").write_text("A")
    folders.commit(0)  # a plain loss function's first commit: step 0
    (checkpoint.path / "state").write_text("B")

    def killed(source: object, target: object) -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(SystemExit):
        folders.commit(0)  # its second commit, of the same step
    monkeypatch.undo()
    folders.end()
    resume = folders.prepare(individual(uid=1), redo=True)
    assert resume is not None and resume.state is not None
    assert (folders.folder(1) / resume.state / "state").read_text() == "A"


def test_committed_tells_each_folder_s_latest_state(tmp_path) -> None:
    """What a batch script compares between two jobs: (step, commit) per folder, growing with every commit."""
    assert committed(tmp_path) == {}
    folders = EvaluationFolders(tmp_path, root=True)
    folders.begin(9, None, lambda: None)
    checkpoint = folders.checkpoint()
    checkpoint.path.mkdir(parents=True)
    readings = []
    for step in (0, 0, 2):
        (checkpoint.path / "state").write_text(str(step))
        folders.commit(step)
        readings.append(committed(tmp_path))
    folders.end()
    (tmp_path / "evaluations" / "stray").mkdir()  # not an evaluation folder
    assert readings == [{9: (0, 1)}, {9: (0, 2)}, {9: (2, 1)}]


# ---------------------------------------------------------------------------- inheritance, step budget


class Seeding(evaluations.Inheritance):
    """Starts every evaluation from a state after 2 epochs of ``w = 1``, for 2 epochs more; keeps all."""

    def seed(self, ind: Individual, folder: Path) -> Resume | None:
        (folder / "step-00000002.000000").mkdir(parents=True)
        (folder / "step-00000002.000000" / "state.json").write_text(json.dumps({"epoch": 2, "w": 1.0}))
        (folder / "interim.json").write_text(json.dumps([{"loss": 0.5, "metrics": {}}] * 2))
        return Resume([(0.5, {})] * 2, 2, "step-00000002.000000", 4)

    def until(self, ind: Individual) -> int:
        return 4

    def keep(self, ind: Individual, folder: Path, island) -> bool:
        return True


def test_an_inherited_state_is_continued_until_the_step_budget(make_evaluator, tmp_path) -> None:
    training = Training()
    evaluator = make_evaluator(training)
    assert evaluator.folders is not None
    evaluator.folders.inheritance = Seeding()
    ind = individual(uid=7, x=0.4)
    outcome = attempt(evaluator, ind, redo=False)
    # Epochs 2 and 3 trained from the seeded state; the generator is ended after step 4, completed.
    assert training.trained == [2, 3]
    assert (outcome.status, outcome.steps) == (Status.COMPLETED, 4)
    assert outcome.loss == pytest.approx(1.0 + 0.4 / 3 + 0.4 / 4)
    folder = evaluator.folders.folder(7)
    assert step_names(folder) == ["step-00000004"]  # the last step's state is committed
    conclude(evaluator.folders, ind, outcome, [])
    assert folder.is_dir(), "the inheritance keeps the folder"
    # Attempted again, the step budget comes from the inheritance.
    assert evaluator.folders.prepare(ind, redo=True).until == 4


def test_without_inheritance_nothing_is_seeded_and_there_is_no_budget(tmp_path) -> None:
    folders = EvaluationFolders(tmp_path, root=True)
    assert folders.prepare(individual(uid=3), redo=False) is None
    null = evaluations.Inheritance()
    assert null.until(individual()) == 0 and not null.keep(individual(), tmp_path, [])


def test_sweep_keeps_inheritable_folders(tmp_path) -> None:
    base = tmp_path / "evaluations"
    for name in ("1", "2", ".retired-3"):
        (base / name).mkdir(parents=True)
        (base / name / evaluations.INHERITABLE).touch()
    (base / "4").mkdir()
    (base / "5").mkdir()
    (base / "5" / evaluations.INHERITABLE).touch()  # of an individual whose record the killed job never wrote
    assert sweep(tmp_path, [], [individual(uid=1, x=0.1), individual(uid=2, x=0.2)], 0) == 3
    assert sorted(os.listdir(base)) == ["1", "2"]


def test_a_budget_spent_before_a_stop_completes_and_is_not_trained_again(make_evaluator, tmp_path) -> None:
    """A stop at the budget's last commit: completed there; an attempt of a spent budget trains nothing."""
    training = Training(stop_at=3)  # the stop arrives during the last step of the budget
    evaluator = make_evaluator(training, stop_soon=training.stop_soon)
    assert evaluator.folders is not None
    evaluator.folders.inheritance = Seeding()
    ind = individual(uid=8, x=0.4)
    outcome = attempt(evaluator, ind, redo=False)
    assert (outcome.status, outcome.steps, training.trained) == (Status.COMPLETED, 4, [2, 3])
    again = Training()
    evaluator = make_evaluator(again)
    evaluator.folders.inheritance = Seeding()
    outcome = attempt(evaluator, ind, redo=True)  # as after a job killed before the result was stored
    assert (outcome.status, outcome.steps, again.trained) == (Status.COMPLETED, 4, [])
    assert outcome.loss == pytest.approx(1.0 + 0.4 / 3 + 0.4 / 4)
