"""The trainer bridge on one process: a trainer's callbacks followed as a generator loss (no mpiexec).

A fake trainer runs in the bridge's helper thread and reports interim losses; the tests drive the generator
as propulate's evaluator does (``next``, ``close``) and interrupt it as propulate's watchdog does (a SIGALRM
sent to the main thread, whose handler raises :class:`EvaluationInterrupted`), and check that no thread
outlives its evaluation. The Lightning and Hugging Face loss functions are checked for what they refuse, the
Lightning one also runs by hand on one rank, and both modules import their library lazily (``slow``: these
import Lightning or transformers).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from propulate.errors import EvaluationInterrupted
from propulate.integrations import bridge
from propulate.integrations.bridge import Halted, Reporter, follow_trainer


def trainer_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("test-trainer")]


def fake_trainer(
    losses: list[float], seen: list[Any], batches: int = 3, pause: float = 0.0
) -> Callable[[Reporter], None]:
    """A trainer that trains ``batches`` batches per epoch and reports each of ``losses`` after an epoch."""

    def train(reporter: Reporter) -> None:
        for loss in losses:
            for _ in range(batches):
                reporter.check()
                time.sleep(pause)
            seen.append(("verdict", reporter.report(loss)))
            if reporter.halted:
                seen.append("stopped")
                return
        seen.append("finished")

    return train


class Abandoned:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_each_report_is_yielded_and_the_thread_ends_with_the_generator() -> None:
    seen: list[Any] = []
    abandon = Abandoned()
    stream = follow_trainer(fake_trainer([3.0, 2.0, 1.0], seen), abandon, name="test-trainer")
    assert list(stream) == [3.0, 2.0, 1.0]
    assert seen == [("verdict", True)] * 3 + ["finished"]
    assert abandon.calls == 0 and not trainer_threads()


def test_a_closed_generator_ends_the_training_at_the_report_on_the_verdict() -> None:
    seen: list[Any] = []
    abandon = Abandoned()
    stream = follow_trainer(fake_trainer([3.0, 2.0, 1.0], seen), abandon, name="test-trainer")
    assert next(stream) == 3.0
    assert next(stream) == 2.0
    stream.close()  # pruned: the worker's ranks agreed, every one of them ends here
    assert seen == [("verdict", True), ("verdict", False), "stopped"]
    assert abandon.calls == 0, "an agreed end keeps the worker's process group"
    assert not trainer_threads()


def test_an_exception_in_the_trainer_thread_is_the_loss_functions_and_releases_the_partners() -> None:
    def train(reporter: Reporter) -> None:
        reporter.report(1.0)
        raise ZeroDivisionError("in the trainer's thread")

    abandon = Abandoned()
    stream = follow_trainer(train, abandon, name="test-trainer")
    assert next(stream) == 1.0
    with pytest.raises(ZeroDivisionError, match="in the trainer's thread") as raised:
        next(stream)
    assert "train" in [frame.name for frame in traceback.extract_tb(raised.tb)]
    assert abandon.calls == 1
    assert not trainer_threads()


def test_a_training_that_reports_nothing_ends_the_generator() -> None:
    stream = follow_trainer(lambda reporter: None, Abandoned(), name="test-trainer")
    assert list(stream) == []
    assert not trainer_threads()


class Watchdog:
    """Interrupts the main thread as propulate's watchdog does: SIGALRM sent to it from another thread, whose
    handler raises ``EvaluationInterrupted`` while the loss function runs (:meth:`evaluate`), as propulate's
    handler does while its evaluator is in ``next()``."""

    def __init__(self) -> None:
        self.evaluating = False
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def handler(self, signum: int, frame: object) -> None:
        if self.evaluating:
            raise EvaluationInterrupted("the time limit is near")

    def start(self, delay: float, repeat: float) -> None:
        """Send SIGALRM after ``delay`` s, then every ``repeat`` s (0: once)."""
        main = threading.main_thread().ident or 0

        def interrupt() -> None:
            if self.stop.wait(delay):
                return
            signal.pthread_kill(main, signal.SIGALRM)
            while repeat > 0 and not self.stop.wait(repeat):
                signal.pthread_kill(main, signal.SIGALRM)

        self.threads.append(threading.Thread(target=interrupt, daemon=True))
        self.threads[-1].start()

    def evaluate(self, stream: Iterator[Any]) -> Any:
        """Take the next interim loss, as the evaluator does: interruptible only meanwhile."""
        self.evaluating = True
        try:
            return next(stream)
        finally:
            self.evaluating = False


@pytest.fixture
def watchdog() -> Iterator[Watchdog]:
    dog = Watchdog()
    previous = signal.signal(signal.SIGALRM, dog.handler)
    yield dog
    dog.stop.set()
    for thread in dog.threads:
        thread.join()
    signal.signal(signal.SIGALRM, previous)


def test_an_interruption_mid_epoch_halts_the_thread_before_the_loss_function_ends(watchdog) -> None:
    seen: list[Any] = []
    abandon = Abandoned()
    stream = follow_trainer(
        fake_trainer([3.0, 2.0], seen, batches=50, pause=0.01), abandon, name="test-trainer"
    )
    watchdog.start(0.15, 0.0)
    with pytest.raises(EvaluationInterrupted):
        watchdog.evaluate(stream)
    assert abandon.calls == 1, "the worker's group is aborted: a partner may wait in a collective"
    assert not trainer_threads(), "the trainer's thread ended (Halted at its next batch)"
    assert seen == [], "it never reached its first report"


def test_repeated_interruptions_do_not_cut_the_halt_short(watchdog) -> None:
    halted_at: list[float] = []

    def train(reporter: Reporter) -> None:
        try:
            while True:
                reporter.check()
                time.sleep(0.01)
        except Halted:
            time.sleep(0.3)  # a slow halt (tearing down): interruptions keep coming meanwhile
            halted_at.append(time.monotonic())
            raise

    releases: list[float] = []
    stream = follow_trainer(train, lambda: releases.append(time.monotonic()), name="test-trainer")
    watchdog.start(0.1, 0.02)
    with pytest.raises(EvaluationInterrupted):
        watchdog.evaluate(stream)
    ended = time.monotonic()
    assert len(releases) == 1 and halted_at and halted_at[0] <= ended
    assert not trainer_threads()


def test_a_thread_that_does_not_halt_is_released_and_waited_for_again(monkeypatch) -> None:
    monkeypatch.setattr(bridge, "HALT_TIMEOUT", 0.3)
    release = threading.Event()

    def train(reporter: Reporter) -> None:
        reporter.report(1.0)
        release.wait(10)  # blocked as in a collective whose partner left, until the group is aborted

    calls: list[str] = []

    def abandon() -> None:
        calls.append("abandon")
        release.set()

    stream = follow_trainer(train, abandon, name="test-trainer")
    assert next(stream) == 1.0
    stream.close()
    assert calls == ["abandon"], "after HALT_TIMEOUT the group is aborted, which frees the thread"
    assert not trainer_threads()


# ---------------------------------------------------------------------------------------- the trainers


@pytest.mark.slow  # imports Lightning or transformers: seconds
def test_lightning_loss_fn_refuses_what_the_worker_decides() -> None:
    pytest.importorskip("lightning")
    from propulate.integrations.lightning import lightning_loss_fn

    with pytest.raises(ValueError, match="devices, strategy cannot be given"):
        lightning_loss_fn(lambda params: None, trainer_kwargs={"strategy": "ddp", "devices": 2})
    with pytest.raises(ValueError, match="mode must be 'min' or 'max'"):
        lightning_loss_fn(lambda params: None, mode="maximize")
    with pytest.raises(ValueError, match="method must be one of"):
        lightning_loss_fn(lambda params: None, method="mpi")
    with pytest.raises(TypeError, match="module_factory must be callable"):
        lightning_loss_fn(None)  # type: ignore[arg-type]


@pytest.mark.slow  # imports Lightning or transformers: seconds
def test_lightning_environment_is_the_workers() -> None:
    pytest.importorskip("lightning")
    from propulate.integrations.lightning import WorkerEnvironment
    from propulate.utils.distributed import WorkerGroup

    environment = WorkerEnvironment(WorkerGroup("gloo", 1, 2, "cpu", "node7", 4242))
    assert environment.creates_processes_externally and not WorkerEnvironment.detect()
    assert (environment.main_address, environment.main_port) == ("node7", 4242)
    assert (environment.world_size(), environment.global_rank()) == (2, 1)
    assert (environment.node_rank(), environment.local_rank()) == (1, 0)
    environment.set_world_size(2)
    environment.set_global_rank(1)
    with pytest.raises(RuntimeError, match="world size 4 but the worker's is 2"):
        environment.set_world_size(4)


@pytest.mark.slow  # imports Lightning or transformers: seconds
def test_hf_trainer_loss_fn_refuses_what_the_worker_decides() -> None:
    pytest.importorskip("transformers")
    from propulate.integrations.hf_trainer import hf_trainer_loss_fn, worker_environment
    from propulate.utils.distributed import WorkerGroup

    def make(**kwargs: Any) -> Any:
        return hf_trainer_loss_fn(lambda params: None, train_dataset=[], eval_dataset=[], **kwargs)

    with pytest.raises(ValueError, match="output_dir, save_strategy cannot be given"):
        make(training_args={"save_strategy": "steps", "output_dir": "here"})
    with pytest.raises(ValueError, match="eval_strategy='no' never evaluates"):
        make(training_args={"eval_strategy": "no"})
    with pytest.raises(ValueError, match="trainer_kwargs: model cannot be given"):
        make(trainer_kwargs={"model": None})
    with pytest.raises(ValueError, match="mode must be"):
        make(mode="best")
    group = WorkerGroup("nccl", 1, 2, "cuda:3", "node7", 4242)
    assert worker_environment(group) == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "node7",
        "MASTER_PORT": "4242",
        "ACCELERATE_TORCH_DEVICE": "cuda:3",
    }


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """The group a loss function run by hand creates on ``COMM_SELF``, destroyed afterwards."""
    from propulate.utils.distributed import destroy_worker_process_group

    yield
    destroy_worker_process_group()


@pytest.mark.slow
def test_lightning_loss_fn_by_hand_on_one_rank(one_rank_group) -> None:
    pytest.importorskip("lightning")
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from propulate.integrations.lightning import lightning_loss_fn

    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))

    class Model(pl.LightningModule):
        def __init__(self, lr: float, metric: str) -> None:
            super().__init__()
            self.layer, self.lr, self.metric = torch.nn.Linear(4, 2), lr, metric

        def training_step(self, batch, index):
            return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, index):
            self.log(self.metric, torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def train_dataloader(self):
            return DataLoader(data, batch_size=16)

        def val_dataloader(self):
            return DataLoader(data, batch_size=32)

    kwargs = {"max_epochs": 3, "num_sanity_val_steps": 0}
    loss_fn = lightning_loss_fn(lambda params: Model(params["lr"], "val_loss"), trainer_kwargs=kwargs)
    interim = list(loss_fn({"lr": 0.1}))
    assert [entry["epoch"] for entry in interim] == [0, 1, 2]
    assert all(entry["loss"] == entry["val_loss"] for entry in interim)
    loss_fn = lightning_loss_fn(lambda params: Model(params["lr"], "other"), trainer_kwargs=kwargs)
    with pytest.raises(KeyError, match=r"monitor='val_loss': no such scalar was logged.*'other'"):
        list(loss_fn({"lr": 0.1}))
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("propulate-lightning")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "hidden", "extra"),
    [("lightning", "lightning", "lightning"), ("hf_trainer", "transformers", "transformers")],
)
def test_the_integrations_are_imported_lazily_and_name_their_extra(
    module: str, hidden: str, extra: str
) -> None:
    code = (
        "import sys\n"
        "import propulate, propulate.integrations\n"
        "from propulate import Islands\n"
        "loaded = [m for m in sys.modules if m.startswith(('lightning', 'transformers', 'accelerate'))]\n"
        "assert not loaded, loaded\n"
        f"sys.modules[{hidden!r}] = None\n"
        "try:\n"
        f"    import propulate.integrations.{module}\n"
        "except ImportError as err:\n"
        f"    assert 'pip install \"propulate[{extra}]\"' in str(err), err\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
