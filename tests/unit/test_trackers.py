"""Trackers in one process: the records, the fail-safe runner, and the TensorBoard and MLflow writers."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from propulate.individual import Individual, Status
from propulate.trackers import EvaluationRecord, MLflowTracker, SearchInfo, TensorBoardTracker, Tracker
from propulate.trackers.base import check_trackers
from propulate.trackers.runner import MAX_FAILURES, TrackerThread, Tracking

LIMITS = {"x": (-1.0, 1.0), "n": (1, 4), "opt": ("adam", "sgd")}


def search_info(tmp_path: Path, worker_index: int = 0, session: int = 0, token: str = "t0") -> SearchInfo:
    return SearchInfo(
        str(tmp_path), token, tmp_path, ("loss",), session, 0, worker_index, worker_index, 2, 1, 1
    )


def record(uid: int = 1, status: Status = Status.COMPLETED, steps: int = 0) -> EvaluationRecord:
    ind = Individual({"x": 0.25, "n": 3, "opt": "sgd"}, LIMITS, generation=4, rank=1)
    ind.uid, ind.island, ind.status = uid, 0, status
    ind.loss, ind.metrics = 0.5, {"accuracy": 0.9}
    ind.evaltime, ind.evalperiod = 1_000_000.0, 10.0
    if status is Status.FAILED:
        ind.loss, ind.metrics, ind.error = float("nan"), {}, "Traceback ...\nValueError: broken loss"
    interim = [(2.0 / k, {"accuracy": 0.3 * k}) for k in range(1, steps + 1)]
    return EvaluationRecord.of(ind, interim)


class Recording(Tracker):
    """Remembers its calls; ``fail`` names the methods that raise, ``gate`` holds log_evaluation."""

    def __init__(self, fail: tuple[str, ...] = (), gate: threading.Event | None = None, fail_times: int = -1):
        self.calls: list[tuple[str, object]] = []
        self.fail, self.gate, self.fail_times = fail, gate, fail_times

    def start(self, search):
        self.calls.append(("start", search.worker))
        if "start" in self.fail:
            raise OSError("no such server")

    def log_evaluation(self, record):
        if self.gate is not None:
            self.gate.wait()
        if "log_evaluation" in self.fail and self.fail_times != 0:
            self.fail_times -= 1
            raise ConnectionError("server gone")
        self.calls.append(("log", record.uid))

    def finish(self, stop_reason):
        self.calls.append(("finish", stop_reason))


# ------------------------------------------------------------------------------------------------ records


def test_check_trackers_takes_none_one_or_several_and_names_the_argument():
    one = Recording()
    assert check_trackers(None) == ()
    assert check_trackers(one) == (one,)
    assert check_trackers([one, one]) == (one, one)
    for bad in ("tensorboard", 3, [one, "mlflow"], {"a": one}):
        with pytest.raises(TypeError, match="trackers: expected"):
            check_trackers(bad)


def test_a_tracker_must_implement_log_evaluation():
    with pytest.raises(NotImplementedError, match="log_evaluation"):
        Tracker().log_evaluation(record())


def test_record_of_a_plain_loss_logs_its_values_at_step_zero():
    made = record()
    assert made.params == {"x": 0.25, "n": 3, "opt": "sgd"}
    assert (made.uid, made.island, made.worker, made.generation, made.state) == (1, 0, 1, 4, "COMPLETE")
    assert (made.started, made.finished) == (999_990.0, 1_000_000.0)
    assert made.points() == [(0, 1_000_000.0, {"loss": 0.5, "accuracy": 0.9})]


def test_record_of_a_generator_logs_each_step_and_the_final_values_at_the_last():
    made = record(status=Status.PRUNED, steps=2)
    assert made.state == "PRUNED" and made.steps == 2
    points = made.points()
    assert [step for step, _, _ in points] == [1, 2]
    assert points[0] == (1, 999_995.0, {"loss": 2.0, "accuracy": 0.3})
    assert points[1] == (2, 1_000_000.0, {"loss": 0.5, "accuracy": 0.9})  # the final values win


def test_record_of_a_failed_evaluation_has_no_values_and_its_error_line():
    made = record(status=Status.FAILED, steps=1)
    assert made.values == {} and made.error == "ValueError: broken loss" and made.state == "FAIL"
    assert made.points() == [(1, 1_000_000.0, {"loss": 2.0, "accuracy": 0.3})]


def test_unfinished_evaluations_are_not_recorded():
    ind = Individual({"x": 0.25, "n": 3, "opt": "sgd"}, LIMITS)
    for status in (Status.PENDING, Status.INTERRUPTED):
        ind.status = status
        with pytest.raises(ValueError, match="finished evaluation"):
            EvaluationRecord.of(ind, [])


# ------------------------------------------------------------------------------------------------- runner


def test_the_runner_calls_start_each_evaluation_in_order_and_finish(tmp_path):
    tracker = Recording()
    tracking = Tracking([tracker])
    tracking.start(search_info(tmp_path))
    for uid in range(5):
        tracking.evaluated(lambda uid=uid: record(uid))
    tracking.close("time limit")
    assert tracker.calls == [("start", 0), *[("log", uid) for uid in range(5)], ("finish", "time limit")]


def test_an_empty_tracking_never_makes_a_record(tmp_path):
    tracking = Tracking(())
    tracking.start(search_info(tmp_path))
    tracking.evaluated(lambda: pytest.fail("made a record without trackers"))
    tracking.close(None)


def test_a_tracker_that_fails_to_start_warns_once_and_is_called_no_more(tmp_path, caplog):
    tracker = Recording(fail=("start",))
    tracking = Tracking([tracker])
    with caplog.at_level(logging.WARNING, "propulate"):
        tracking.start(search_info(tmp_path))
        thread = tracking.threads[0]
        for uid in range(20):
            tracking.evaluated(lambda uid=uid: record(uid))
        began = time.monotonic()
        tracking.close(None)
    assert time.monotonic() - began < 1.0
    assert tracker.calls == [("start", 0)]
    failed = [r for r in caplog.records if "failed in start()" in r.getMessage()]
    assert len(failed) == 1 and "OSError: no such server" in failed[0].getMessage()
    assert thread.lost == 20 and thread.logged == 0
    assert any(
        "20 evaluation(s) of worker 0 of island 0 not logged" in r.getMessage() for r in caplog.records
    )


def test_a_tracker_that_keeps_failing_warns_once_and_is_turned_off(tmp_path, caplog):
    tracker = Recording(fail=("log_evaluation",))
    tracking = Tracking([tracker])
    with caplog.at_level(logging.WARNING, "propulate"):
        tracking.start(search_info(tmp_path))
        thread = tracking.threads[0]
        for uid in range(10):
            tracking.evaluated(lambda uid=uid: record(uid))
        tracking.close(None)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed in log_evaluation()" in m for m in messages) == 1
    assert sum(f"{MAX_FAILURES} failures in a row" in m for m in messages) == 1
    assert thread.logged == 0 and thread.lost == 10
    assert tracker.calls == [("start", 0)]  # finish is not called on a tracker turned off


def test_a_tracker_that_fails_now_and_then_goes_on(tmp_path, caplog):
    tracker = Recording(fail=("log_evaluation",), fail_times=MAX_FAILURES - 1)
    tracking = Tracking([tracker])
    with caplog.at_level(logging.WARNING, "propulate"):
        tracking.start(search_info(tmp_path))
        thread = tracking.threads[0]
        for uid in range(6):
            tracking.evaluated(lambda uid=uid: record(uid))
        tracking.close(None)
    assert [uid for call, uid in tracker.calls if call == "log"] == list(range(MAX_FAILURES - 1, 6))
    assert (thread.logged, thread.lost) == (6 - MAX_FAILURES + 1, MAX_FAILURES - 1)
    assert tracker.calls[-1] == ("finish", None)


def test_a_slow_tracker_never_blocks_the_loop_and_the_end_waits_its_flush_timeout(tmp_path, caplog):
    gate = threading.Event()
    tracker = Recording(gate=gate)
    tracker.flush_timeout = 0.5
    try:
        with caplog.at_level(logging.WARNING, "propulate"):
            thread = TrackerThread(tracker, search_info(tmp_path), capacity=4)
            began = time.monotonic()
            for uid in range(100):
                thread.put(record(uid))
            assert time.monotonic() - began < 0.5  # never waits for the tracker
            tracking = Tracking([tracker])
            tracking.threads = [thread]
            began = time.monotonic()
            tracking.close(None)
            assert 0.4 < time.monotonic() - began < 2.0
        messages = [r.getMessage() for r in caplog.records]
        assert sum("slower than the search" in m for m in messages) == 1
        assert sum("left behind" in m for m in messages) == 1
        assert thread.lost >= 95
    finally:
        gate.set()


def test_a_new_session_starts_the_trackers_again(tmp_path):
    tracker = Recording()
    tracking = Tracking([tracker])
    for session in range(2):
        tracking.start(search_info(tmp_path, session=session))
        tracking.evaluated(lambda session=session: record(session))
        tracking.close(None)
    assert tracker.calls == [
        ("start", 0),
        ("log", 0),
        ("finish", None),
        ("start", 0),
        ("log", 1),
        ("finish", None),
    ]


# ------------------------------------------------------------------------------------------------ imports


def test_importing_the_trackers_loads_neither_mlflow_nor_tensorboard_nor_mpi():
    program = (
        "import sys, propulate\n"
        "from propulate.trackers import MLflowTracker, TensorBoardTracker\n"
        "MLflowTracker(); TensorBoardTracker()\n"
        "loaded = {'mlflow', 'tensorboard', 'mpi4py.MPI', 'torch'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("make", "extra"), [(MLflowTracker, "mlflow"), (TensorBoardTracker, "tensorboard")])
def test_a_missing_library_names_the_extra(monkeypatch, make, extra):
    monkeypatch.setitem(sys.modules, extra, None)  # as if it were not installed
    with pytest.raises(ImportError, match=rf'pip install "propulate\[{extra}\]"'):
        make()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TensorBoardTracker(flush_timeout=-1), "flush_timeout"),
        (lambda: MLflowTracker(flush_timeout=float("nan")), "flush_timeout"),
        (lambda: MLflowTracker(http_timeout=0), "http_timeout"),
        (lambda: MLflowTracker(http_retries=-1), "http_retries"),
        (lambda: MLflowTracker(experiment_name=""), "experiment_name"),
        (lambda: MLflowTracker(wait_timeout=True), "wait_timeout"),
    ],
)
def test_bad_settings_name_the_argument(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ------------------------------------------------------------------------------------------------ writers


def test_tensorboard_writes_one_run_that_its_reader_reads_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    tracker = TensorBoardTracker()
    tracker.start(search_info(tmp_path))
    made = record(uid=7, status=Status.PRUNED, steps=2)
    tracker.log_evaluation(made)
    tracker.log_evaluation(made)  # a run already written is kept as it is
    folder = tmp_path / "tensorboard" / "island-0" / "worker-1" / "7"
    assert tracker.run_dir(made) == folder and len(list(folder.iterdir())) == 1
    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    content = accumulator.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content[metadata.SESSION_START_INFO_TAG])
    hparams = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.session_start_info.hparams.items()}
    assert hparams == {"x": 0.25, "n": 3.0, "opt": "sgd", "state": "PRUNED"}
    assert [(e.step, e.value) for e in accumulator.Scalars("loss")] == [(1, 2.0), (2, 0.5)]
    assert [(e.step, e.value) for e in accumulator.Scalars("accuracy")] == [
        (1, np.float32(0.3)),
        (2, np.float32(0.9)),
    ]


def test_tensorboard_refuses_a_folder_it_cannot_make(tmp_path):
    pytest.importorskip("tensorboard")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError):
        TensorBoardTracker(blocker / "runs").start(search_info(tmp_path))


@pytest.mark.slow
def test_mlflow_nests_runs_under_one_parent_that_a_resumed_session_continues(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    first, second = MLflowTracker(), MLflowTracker()
    first.start(search_info(tmp_path, token="a"))
    second.start(search_info(tmp_path, worker_index=1, token="a"))  # reads the first's parent run
    assert second.parent_run_id == first.parent_run_id
    first.log_evaluation(record(1))
    second.log_evaluation(record(2, Status.PRUNED, steps=2))
    second.log_evaluation(record(3, Status.FAILED, steps=1))
    first.finish("time limit")
    parent = first.parent_run_id
    resumed = MLflowTracker()
    resumed.start(search_info(tmp_path, session=1, token="b"))
    assert resumed.parent_run_id == parent
    resumed.log_evaluation(record(4))
    resumed.finish(None)
    mlflow.set_tracking_uri(first.uri)
    runs = mlflow.search_runs(
        search_all_experiments=True, filter_string=f"tags.mlflow.parentRunId = '{parent}'"
    )
    by_uid = runs.set_index(runs["tags.propulate.uid"].astype(int)).sort_index()
    assert by_uid.index.tolist() == [1, 2, 3, 4]
    assert by_uid["status"].tolist() == ["FINISHED", "KILLED", "FAILED", "FINISHED"]
    assert by_uid["tags.propulate.state"].tolist() == ["COMPLETE", "PRUNED", "FAIL", "COMPLETE"]
    assert by_uid.loc[2, "metrics.loss"] == 0.5 and by_uid.loc[2, "params.opt"] == "sgd"
    assert by_uid.loc[3, "tags.propulate.fail_reason"] == "ValueError: broken loss"
    history = mlflow.tracking.MlflowClient(first.uri).get_metric_history(by_uid.loc[2, "run_id"], "loss")
    assert sorted((m.step, m.value) for m in history) == [(1, 2.0), (2, 0.5)]
    run = mlflow.get_run(parent)
    assert run.info.status == "FINISHED" and run.data.tags["propulate.sessions"] == "2"


@pytest.mark.slow
def test_mlflow_on_a_closed_port_fails_fast_and_the_others_hear_it(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    # The tracker sets MLflow's HTTP settings process-wide unless they are set: set them for this test only.
    for name, value in {"TIMEOUT": "2", "MAX_RETRIES": "1", "BACKOFF_FACTOR": "1"}.items():
        monkeypatch.setenv(f"MLFLOW_HTTP_REQUEST_{name}", value)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    with pytest.raises(Exception, match=r"127\.0\.0\.1"):  # MLflow's own error for a refused connection
        MLflowTracker(uri).start(search_info(tmp_path, token="c"))
    assert time.monotonic() - began < 15
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="could not create the parent run"):
        MLflowTracker(uri).start(search_info(tmp_path, worker_index=1, token="c"))
    assert time.monotonic() - began < 5


def test_a_record_that_cannot_be_made_warns_once_and_the_loop_goes_on(tmp_path, caplog):
    tracker = Recording()
    tracking = Tracking([tracker])
    tracking.start(search_info(tmp_path))

    def broken() -> EvaluationRecord:
        raise KeyError("losses")

    with caplog.at_level(logging.WARNING, "propulate"):
        tracking.evaluated(broken)
        tracking.evaluated(broken)
        tracking.evaluated(lambda: record(5))
        tracking.close(None)
    assert sum("could not be recorded" in r.getMessage() for r in caplog.records) == 1
    assert tracker.calls == [("start", 0), ("log", 5), ("finish", None)]


def test_mlflow_logs_large_evaluations_in_as_few_batches_as_its_limits_allow(tmp_path):
    pytest.importorskip("mlflow")

    class Client:
        def __init__(self):
            self.batches, self.ended = [], []

        def create_run(self, experiment_id, start_time, tags, run_name):
            return type("Run", (), {"info": type("Info", (), {"run_id": "r"})()})()

        def log_batch(self, run_id, metrics, params):
            self.batches.append((len(params), len(metrics)))

        def set_terminated(self, run_id, status, end_time):
            self.ended.append(status)

    limits = {f"p{k}": (0.0, 1.0) for k in range(150)}
    ind = Individual({name: 0.5 for name in limits}, limits)
    ind.uid, ind.status, ind.loss, ind.evaltime = 1, Status.PRUNED, 0.5, 10.0
    made = EvaluationRecord.of(ind, [(1.0 / k, {}) for k in range(1, 1001)])
    tracker = MLflowTracker()
    tracker._client, tracker._search, tracker.parent_run_id = Client(), search_info(tmp_path), "p"
    tracker.log_evaluation(made)
    assert tracker._client.batches == [(100, 900), (50, 100)]  # 150 params, 1,000 steps' losses
    assert tracker._client.ended == ["KILLED"]


def test_record_of_several_objectives_logs_each_as_the_loss_function_returned_it():
    from propulate.objectives import Objectives

    objectives = Objectives.of({"error": "minimize", "accuracy": "maximize"})
    ind = Individual({"x": 0.25, "n": 3, "opt": "sgd"}, LIMITS)
    ind.uid, ind.status, ind.loss, ind.losses, ind.evaltime = 3, Status.COMPLETED, 0.2, (0.2, -0.9), 5.0
    made = EvaluationRecord.of(ind, [(0.4, {}), (0.2, {})], objectives)
    assert made.values == {"error": 0.2, "accuracy": 0.9}
    assert made.points()[-1] == (2, 5.0, {"loss": 0.2, "error": 0.2, "accuracy": 0.9})
