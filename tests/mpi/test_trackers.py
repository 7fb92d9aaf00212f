"""Trackers under mpiexec: TensorBoard and MLflow hold one run per evaluation, equal to the checkpoint's.

Each evaluation is logged once, by the first rank of the worker that finished it (2-rank workers), across
islands with migration and across a resume that evaluates an interrupted evaluation again; a tracker that
cannot write (an unwritable folder, a tracking URI on a closed port) warns and the run completes in normal
time.
"""

from __future__ import annotations

import math
import re
import socket
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
pd = pytest.importorskip("pandas")

from propulate.report.frame import interim_losses, load_dataframe, read_checkpoint  # noqa: E402

STATUSES = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}


def run(mpirun, checkpoint: Path, n: int, *args: str, timeout: float = 150.0):
    common = ("--checkpoint", str(checkpoint), "--ranks-per-worker", "2")
    return mpirun("trackers_run.py", n, *common, *args, timeout=timeout)


def expected(checkpoint: Path):
    """The checkpoint's evaluations (one row per evaluation) and learning curves, by uid."""
    frame = load_dataframe(checkpoint)
    population = [ind for inds in read_checkpoint(checkpoint).populations.values() for ind in inds]
    curves = interim_losses(population).groupby("uid")["loss"].apply(list).to_dict()
    return frame, curves


def tensorboard_runs(log_dir: Path) -> dict[int, dict]:
    """Read every run with TensorBoard's own reader: its folder, hparams, and scalars by tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    runs = {}
    for folder in sorted(log_dir.glob("island-*/worker-*/*")):
        accumulator = EventAccumulator(str(folder))
        accumulator.Reload()
        content = accumulator.PluginTagToContent("hparams")[metadata.SESSION_START_INFO_TAG]
        start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
        hparams = {}
        for name, value in start.hparams.items():
            hparams[name] = getattr(value, value.WhichOneof("kind"))
        scalars = {
            tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]
        }
        runs[int(folder.name)] = {"folder": folder, "hparams": hparams, "scalars": scalars}
    return runs


def f32(value: float) -> float:
    return float(np.float32(value))


def check_tensorboard(log_dir: Path, frame, curves) -> None:
    runs = tensorboard_runs(log_dir)
    assert sorted(runs) == sorted(frame["uid"].tolist())  # one run per evaluation, none twice
    for row in frame.itertuples():
        got = runs[row.uid]
        assert got["folder"].parent.name == f"worker-{row.worker}"
        assert got["folder"].parent.parent.name == f"island-{row.island}"
        assert got["hparams"] == {
            "x": row.params_x, "n": float(row.params_n), "opt": row.params_opt, "state": row.state
        }  # fmt: skip
        losses = got["scalars"].get("loss", [])
        curve = curves.get(row.uid, [])
        if row.state == "FAIL":  # failed at its second step: the first step's loss is all
            assert [step for step, _ in losses] == [1]
            continue
        assert [step for step, _ in losses] == list(range(1, len(losses) + 1))
        assert losses[-1][1] == f32(row.value)
        if curve:  # the checkpoint holds the curves its surrogate kept
            assert [value for _, value in losses] == [f32(v) for v in curve]
        accuracy = got["scalars"]["accuracy"]
        assert accuracy[-1] == (len(losses), f32(row.user_attrs_accuracy))


def check_mlflow(uri: str, frame, curves, parents: int = 1) -> None:
    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(uri)
    everything = mlflow.search_runs(search_all_experiments=True)
    parent_ids = everything.loc[everything["tags.mlflow.parentRunId"].isna(), "run_id"].tolist()
    assert len(parent_ids) == parents
    children = everything[everything["tags.mlflow.parentRunId"].isin(parent_ids)]
    assert len(children) == len(everything) - parents
    by_uid = children.set_index(children["tags.propulate.uid"].astype(int))
    assert by_uid.index.is_unique and sorted(by_uid.index) == sorted(frame["uid"].tolist())
    client = MlflowClient(uri)
    for row in frame.itertuples():
        got = by_uid.loc[row.uid]
        assert got["status"] == STATUSES[row.state] and got["tags.propulate.state"] == row.state
        assert float(got["params.x"]) == row.params_x and int(got["params.n"]) == row.params_n
        assert got["params.opt"] == row.params_opt
        assert int(got["tags.propulate.island"]) == row.island
        assert int(got["tags.propulate.worker"]) == row.worker
        history = sorted((m.step, m.value) for m in client.get_metric_history(got["run_id"], "loss"))
        if row.state == "FAIL":
            assert got["tags.propulate.fail_reason"] == "ValueError: x too large"
            assert [step for step, _ in history] == [1]
            continue
        assert got["metrics.loss"] == row.value and got["metrics.accuracy"] == row.user_attrs_accuracy
        assert [step for step, _ in history] == list(range(1, len(history) + 1))
        if row.uid in curves:
            assert [value for _, value in history] == curves[row.uid]


@pytest.mark.parametrize("n", [2, 4])
def test_every_evaluation_is_one_run_in_tensorboard_and_mlflow(mpirun, tmp_path, n):
    # n = 4: two 2-rank workers on two islands that migrate; n = 2: one 2-rank worker, resumed once.
    checkpoint = tmp_path / "ckpt"
    islands = str(n // 2)
    stop = ("--stop-at", "4") if n == 2 else ()  # the first session stops during its 4th evaluation
    first = run(mpirun, checkpoint, n, "--generations", "6", "--num-islands", islands, *stop)
    assert "Tracker" not in first.stdout, first.stdout  # no tracker warned
    if n == 2:  # the search resumes: the parent run continues, no evaluation is logged twice
        waiting = load_dataframe(checkpoint, include_interrupted=True)
        redone = waiting.loc[waiting["state"] == "WAITING", "uid"].tolist()
        assert len(redone) == 1, waiting  # interrupted: not logged now, evaluated again and logged on resume
        run(mpirun, checkpoint, n, "--generations", "10", "--num-islands", islands)
    frame, curves = expected(checkpoint)
    assert len(frame) == (10 if n == 2 else 6) * (n // 2)
    assert set(frame["state"]) >= {"COMPLETE", "FAIL"}
    check_tensorboard(checkpoint / "tensorboard", frame, curves)
    check_mlflow(f"sqlite:///{checkpoint / 'mlflow' / 'mlflow.db'}", frame, curves)
    if n == 2:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{checkpoint / 'mlflow' / 'mlflow.db'}")
        parent = client.search_runs(
            [e.experiment_id for e in client.search_experiments()], "tags.propulate.sessions = '2'"
        )
        assert len(parent) == 1 and parent[0].info.status == "FINISHED"
        assert redone[0] in frame["uid"].tolist()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_failing_trackers_warn_once_and_the_run_completes(mpirun, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("TensorBoard cannot make a folder inside a file")
    checkpoint = tmp_path / "ckpt"
    out = run(
        mpirun,
        checkpoint,
        4,
        "--generations",
        "6",
        "--tensorboard",
        str(blocker / "tensorboard"),
        "--mlflow",
        f"http://127.0.0.1:{closed_port()}",
        "--flush-timeout",
        "20",
        timeout=120,
    )
    frame = load_dataframe(checkpoint)
    assert len(frame) == 12  # every evaluation of both workers
    for name in ("TensorBoardTracker", "MLflowTracker"):
        for rank in (0, 2):  # each worker's first rank warns once when its tracker fails
            failed = [
                line
                for line in out.stdout.splitlines()
                if line.startswith(f"[rank {rank}]") and f"Tracker {name} failed in start()" in line
            ]
            assert len(failed) == 1, out.stdout
    assert "left behind" not in out.stdout, out.stdout
    seconds = [float(s) for s in re.findall(r"SECONDS ([\d.]+)", out.stdout)]
    # A tracker that failed at its start costs the run nothing but the start (importing mlflow, one
    # refused connection with one retry): well within the flush timeout.
    assert len(seconds) == 4 and max(seconds) < 20, seconds
    assert not math.isnan(frame["value"].min())
