"""TensorBoard: one run per evaluation, with its parameters as hyperparameters (the HParams dashboard).

Each evaluation is written to a run folder of its own, ``<log_dir>/island-<i>/worker-<w>/<uid>``, in one
event file: the parameters and the evaluation's state as the hyperparameters of the run (a session of the
HParams plugin, with the plugin's end status: success, unknown for pruned, failure), then scalars. A plain
loss function gives each objective's value (``loss``) and metric at step 0; a generator loss function gives
the loss (``loss``, the first objective minimized) and metrics yielded at each step ``1..n``, the last
step carrying the final values. TensorBoard stores scalars as 32-bit floats.

The events are written with TensorBoard's own record writer (no TensorFlow, no torch), synchronously: a
tracker runs in a thread of its own (:mod:`propulate.trackers.runner`).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from .base import EvaluationRecord, SearchInfo, Tracker, check_timeout, require

__all__ = ["TensorBoardTracker"]

# The plugin's end status has no name for a run stopped early: the hyperparameter "state" tells.
_STATUS_NAMES = {"COMPLETE": "STATUS_SUCCESS", "PRUNED": "STATUS_UNKNOWN", "FAIL": "STATUS_FAILURE"}


class TensorBoardTracker(Tracker):
    """Write each evaluation as a TensorBoard run with its hyperparameters, state and (interim) metrics.

    View with ``tensorboard --logdir <log_dir>``: the HParams dashboard lists one row per evaluation
    (:doc:`/trackers`).

    Parameters
    ----------
    log_dir : str or pathlib.Path, optional
        The folder of the runs; created if missing. Default: ``tensorboard`` in the checkpoint folder.
    flush_timeout : float >= 0
        Seconds the worker waits at the end of a session for evaluations still queued (see :class:`Tracker`).

    Raises
    ------
    ImportError
        If tensorboard is not installed (``pip install "propulate[tensorboard]"``).
    ValueError
        If ``flush_timeout`` is negative or not finite.

    Notes
    -----
    An evaluation whose run folder already holds an event file is not written again: a search that resumes
    after its job was killed before the checkpoint recorded the evaluation's end evaluates it again, and
    TensorBoard keeps the first result.
    """

    def __init__(self, log_dir: str | Path | None = None, flush_timeout: float = 30.0) -> None:
        require("tensorboard", "tensorboard", "TensorBoardTracker")
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.flush_timeout = check_timeout("flush_timeout", flush_timeout)
        self._root: Path | None = None
        self._host = socket.gethostname()

    def __repr__(self) -> str:
        return f"TensorBoardTracker(log_dir={str(self.log_dir) if self.log_dir else None!r})"

    def start(self, search: SearchInfo) -> None:
        """Create the log folder (default: ``tensorboard`` in the checkpoint folder)."""
        root = self.log_dir if self.log_dir is not None else search.checkpoint_path / "tensorboard"
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(f"cannot write to {root}")
        self._root = root

    def run_dir(self, record: EvaluationRecord) -> Path:
        """Return the run folder of an evaluation (after :meth:`start`)."""
        if self._root is None:
            raise RuntimeError("TensorBoardTracker.run_dir: start() was not called")
        return self._root / f"island-{record.island}" / f"worker-{record.worker}" / str(record.uid)

    def log_evaluation(self, record: EvaluationRecord) -> None:
        """Write the evaluation's run: hyperparameters, scalars at their steps, end status."""
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
        from tensorboard.plugins.hparams import summary_v2 as hp
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder = self.run_dir(record)
        folder.mkdir(parents=True, exist_ok=True)
        if any(name.startswith("events.out.tfevents.") for name in os.listdir(folder)):
            return
        hparams = {name: _hparam(value) for name, value in record.params.items()}
        hparams["state"] = record.state
        events = [
            event_pb2.Event(wall_time=record.started, file_version="brain.Event:2"),
            event_pb2.Event(
                wall_time=record.started,
                summary=hp.hparams_pb(hparams, trial_id=str(record.uid), start_time_secs=record.started),
            ),
        ]

        for step, wall_time, values in record.points():
            value = [summary_pb2.Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()]
            summary = summary_pb2.Summary(value=value)
            events.append(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
        status = getattr(api_pb2, _STATUS_NAMES[record.state])
        ended = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=record.finished)
        content = metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(session_end_info=ended))
        events.append(
            event_pb2.Event(
                wall_time=record.finished,
                summary=summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=metadata.SESSION_END_INFO_TAG, metadata=content)]
                ),
            )
        )
        name = f"events.out.tfevents.{int(time.time())}.{self._host}.{os.getpid()}.{record.uid}"
        partial = folder / f".{name}.part"
        with open(partial, "wb") as handle:
            writer = RecordWriter(handle)
            for event in events:
                writer.write(event.SerializeToString())
        # Renamed when complete: TensorBoard never reads half a file, and a run is written at most once.
        partial.rename(folder / name)


def _hparam(value: Any) -> bool | float | str:
    """Return a parameter value as the HParams plugin holds it: a bool, a number or a string."""
    if isinstance(value, bool):
        return value
    if isinstance(value, np.generic):
        return _hparam(value.item())
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)
