"""MLflow: a parent run per search, a nested run per evaluation.

The first worker of a session creates the search's parent run (or continues the one of the session before,
see *Resume*) and writes its id to ``<checkpoint>/mlflow/parent.json`` under the session's token; the other
workers read it there. Each worker then logs its own evaluations as runs nested under the parent (tag
``mlflow.parentRunId``): the parameters as params, the values and metrics at their steps
(:meth:`~propulate.trackers.base.EvaluationRecord.points`), the state as run status — completed
``FINISHED``, pruned ``KILLED``, failed ``FAILED`` — and as tag ``propulate.state`` (``COMPLETE``,
``PRUNED``, ``FAIL``, the results frame's names), with the tags ``propulate.uid``, ``propulate.island``,
``propulate.worker``, ``propulate.generation`` and, for a failed one, ``propulate.fail_reason``.

Store. Without a tracking URI the runs go to an SQLite database in the checkpoint folder,
``sqlite:///<checkpoint>/mlflow/mlflow.db`` (MLflow 3's own default is ``sqlite:///mlflow.db`` in the working
directory; its file store ``./mlruns`` is deprecated): it works offline, ``mlflow.search_runs`` and
``mlflow ui --backend-store-uri`` read it. The first worker creates it, before the others write to it.

Resume. A session that resumes the search continues its parent run (status ``RUNNING`` again, tag
``propulate.sessions`` counting the sessions) when ``parent.json`` names one in the same store and
experiment; otherwise (another store, a deleted run) it creates a new parent run, tagged with the same
``propulate.search``. Each evaluation is logged by the worker that finished it, once: an evaluation cut
short by the end of a job is logged when it is evaluated again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import EvaluationRecord, SearchInfo, Tracker, check_timeout, require

__all__ = ["MLflowTracker"]

_STATUSES = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
# MLflow's limits on one log_batch call (params, and entries in all), and on a param's and a tag's value.
_BATCH_METRICS, _BATCH_PARAMS, _PARAM_CHARS, _TAG_CHARS = 1000, 100, 6000, 5000


class MLflowTracker(Tracker):
    """Log a parent run per search to MLflow and a nested run per evaluation.

    Parameters
    ----------
    tracking_uri : str, optional
        Where the runs go: a server (``http://host:5000``), a database (``sqlite:///path``, ...).
        Default: ``sqlite:///<checkpoint>/mlflow/mlflow.db``, offline (see the module's docstring).
    experiment_name : str
        The experiment of the runs; created if missing (default ``"propulate"``).
    run_name : str, optional
        The parent run's name. Default: the checkpoint folder's name.
    tags : mapping of str to str, optional
        Further tags of the parent run.
    http_timeout : float > 0
        Seconds one HTTP request to a tracking server may take (default 10; MLflow's own is 120).
    http_retries : int >= 0
        Retries of a failed HTTP request (default 2; MLflow's own is 7, about 4 minutes in all).
    wait_timeout : float >= 0
        Seconds a worker waits for the first worker's parent run before it gives up (default 120).
    flush_timeout : float >= 0
        Seconds the worker waits at the end of a session for evaluations still queued (see :class:`Tracker`).

    Raises
    ------
    ImportError
        If mlflow is not installed (``pip install "propulate[mlflow]"``).
    ValueError
        For a negative or non-finite timeout, a negative number of retries, or an empty experiment name.
    TypeError
        If ``tags`` is not a mapping.

    Notes
    -----
    MLflow reads its HTTP settings from the environment, for the whole process: with a server URI, the
    tracker sets ``MLFLOW_HTTP_REQUEST_TIMEOUT``, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and
    ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`` (to 1 s) when it starts, unless they are set already.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str = "propulate",
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        http_timeout: float = 10.0,
        http_retries: int = 2,
        wait_timeout: float = 120.0,
        flush_timeout: float = 30.0,
    ) -> None:
        require("mlflow", "mlflow", "MLflowTracker")
        if not isinstance(experiment_name, str) or not experiment_name:
            raise ValueError(f"experiment_name: expected a non-empty str, got {experiment_name!r}")
        if tags is not None and not isinstance(tags, Mapping):
            raise TypeError(f"tags: expected a mapping of str to str, got {type(tags).__name__}")
        if isinstance(http_retries, bool) or not isinstance(http_retries, int) or http_retries < 0:
            raise ValueError(f"http_retries: expected an int >= 0, got {http_retries!r}")
        self.http_timeout = check_timeout("http_timeout", http_timeout)
        if self.http_timeout == 0:
            raise ValueError(f"http_timeout: expected a finite number of seconds > 0, got {http_timeout!r}")
        self.tracking_uri = tracking_uri
        self.experiment_name, self.run_name = experiment_name, run_name
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.http_retries = http_retries
        self.wait_timeout = check_timeout("wait_timeout", wait_timeout)
        self.flush_timeout = check_timeout("flush_timeout", flush_timeout)
        self.uri: str | None = None  # the store of the session, once started
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self._client: Any = None
        self._search: SearchInfo | None = None

    def __repr__(self) -> str:
        return f"MLflowTracker(tracking_uri={self.tracking_uri!r}, experiment_name={self.experiment_name!r})"

    def start(self, search: SearchInfo) -> None:
        """Connect to the store; on the first worker create or continue the parent run, else wait for it.

        Raises
        ------
        TimeoutError
            On a worker other than the first, if the parent run is not known after ``wait_timeout`` seconds.
        RuntimeError
            On a worker other than the first, if the first could not create the parent run.
        """
        folder = search.checkpoint_path / "mlflow"
        uri = self.tracking_uri
        if uri is None:
            if search.first:
                folder.mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{(folder / 'mlflow.db').resolve()}"
        elif uri.startswith(("http://", "https://")):
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(self.http_timeout))))
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(self.http_retries))
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        self._search, self.uri = search, uri
        state = folder / "parent.json"
        if not search.first:
            shared = _wait_for(state, search.token, self.wait_timeout)
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(uri)
            self.experiment_id, self.parent_run_id = shared["experiment_id"], shared["parent_run_id"]
            return
        try:
            self._begin(uri, folder, state, search)
        except Exception as err:  # the other workers learn it at once, instead of waiting for the parent run
            _share(folder, state, {"token": search.token, "error": f"{type(err).__name__}: {err}"})
            raise

    def _begin(self, uri: str, folder: Path, state: Path, search: SearchInfo) -> None:
        """On the first worker: the experiment and parent run; shared with the others through ``state``."""
        from mlflow.tracking import MlflowClient

        client = self._client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(self.experiment_name)
        if experiment is not None:
            self.experiment_id = experiment.experiment_id
        else:
            location = (folder / "artifacts").resolve().as_uri() if self.tracking_uri is None else None
            self.experiment_id = client.create_experiment(self.experiment_name, artifact_location=location)
        self.parent_run_id = self._continued(client, state, search) or self._created(client, search)
        shared = {
            "token": search.token,
            "search": search.search,
            "tracking_uri": uri,
            "experiment_id": self.experiment_id,
            "parent_run_id": self.parent_run_id,
        }
        _share(folder, state, shared)

    def _continued(self, client: Any, state: Path, search: SearchInfo) -> str | None:
        """Return the parent run of the session before, set running again, if this session resumes it."""
        if not search.resumed or not state.is_file():
            return None
        try:
            before = json.loads(state.read_text())
        except (OSError, ValueError):
            return None
        if before.get("tracking_uri") != self.uri or before.get("experiment_id") != self.experiment_id:
            return None
        run_id = str(before.get("parent_run_id"))
        try:
            run = client.get_run(run_id)
        except Exception:  # deleted, or never written: a new parent run
            return None
        if run.info.lifecycle_stage != "active":
            return None
        sessions = int(run.data.tags.get("propulate.sessions", "1")) + 1
        client.update_run(run_id, status="RUNNING")
        client.set_tag(run_id, "propulate.sessions", str(sessions))
        self._layout_tags(client, run_id, search)
        return run_id

    def _created(self, client: Any, search: SearchInfo) -> str:
        """Create the search's parent run."""
        tags = {"propulate.search": search.search[:_TAG_CHARS], "propulate.sessions": "1", **self.tags}
        name = self.run_name or Path(search.search).name or "propulate"
        run = client.create_run(self.experiment_id, run_name=name, tags=tags)
        self._layout_tags(client, run.info.run_id, search)
        return str(run.info.run_id)

    def _layout_tags(self, client: Any, run_id: str, search: SearchInfo) -> None:
        from mlflow.entities import RunTag

        layout = {
            "propulate.num_workers": search.num_workers,
            "propulate.num_islands": search.num_islands,
            "propulate.ranks_per_worker": search.ranks_per_worker,
            "propulate.objectives": ",".join(search.objectives),
            "propulate.session": search.session,
        }
        client.log_batch(run_id, tags=[RunTag(key, str(value)) for key, value in layout.items()])

    def log_evaluation(self, record: EvaluationRecord) -> None:
        """Log the evaluation as a run nested under the search's parent run."""
        from mlflow.entities import Metric, Param

        client = self._client
        if client is None or self._search is None:
            raise RuntimeError("MLflowTracker.log_evaluation: start() did not succeed")
        tags = {
            "mlflow.parentRunId": self.parent_run_id,
            "propulate.search": self._search.search[:_TAG_CHARS],
            "propulate.uid": str(record.uid),
            "propulate.island": str(record.island),
            "propulate.worker": str(record.worker),
            "propulate.generation": str(record.generation),
            "propulate.state": record.state,
        }
        if record.error:
            tags["propulate.fail_reason"] = record.error[:_TAG_CHARS]
        name = f"island{record.island}-worker{record.worker}-gen{record.generation}"
        run = client.create_run(self.experiment_id, start_time=_ms(record.started), tags=tags, run_name=name)
        run_id = run.info.run_id
        params = [Param(key, str(value)[:_PARAM_CHARS]) for key, value in record.params.items()]
        metrics = [
            Metric(key, value, _ms(wall_time), step)
            for step, wall_time, values in record.points()
            for key, value in values.items()
        ]
        # As few calls as MLflow's limits allow: each is a round trip (or a database commit).
        while params or metrics:
            some_params, params = params[:_BATCH_PARAMS], params[_BATCH_PARAMS:]
            room = _BATCH_METRICS - len(some_params)
            some_metrics, metrics = metrics[:room], metrics[room:]
            client.log_batch(run_id, metrics=some_metrics, params=some_params)
        client.set_terminated(run_id, _STATUSES[record.state], end_time=_ms(record.finished))

    def finish(self, stop_reason: str | None) -> None:
        """On the first worker: end the parent run, ``FINISHED``, or ``KILLED`` if stopped early."""
        if self._search is None or not self._search.first or self._client is None:
            return
        if stop_reason is not None:
            self._client.set_tag(self.parent_run_id, "propulate.stop_reason", stop_reason[:_TAG_CHARS])
        self._client.set_terminated(self.parent_run_id, "FINISHED" if stop_reason is None else "KILLED")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _share(folder: Path, state: Path, shared: dict[str, Any]) -> None:
    """Write what the first worker shares with the others; they never read half a file."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".parent.json.{os.getpid()}"
    partial.write_text(json.dumps(shared, indent=1))
    os.replace(partial, state)


def _wait_for(state: Path, token: str, timeout: float) -> dict[str, Any]:
    """Wait for the first worker to write the session's parent run to ``state``; return what it wrote.

    Raises
    ------
    TimeoutError
        After ``timeout`` seconds without it.
    """
    deadline, pause = time.monotonic() + timeout, 0.05
    while True:
        try:
            shared = json.loads(state.read_text())
            if shared.get("token") == token:
                if "error" in shared:
                    raise RuntimeError(f"the first worker could not create the parent run: {shared['error']}")
                return dict(shared)
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the first worker's parent run was not in {state} within {timeout:g} s")
        time.sleep(pause)
        pause = min(1.0, pause * 2)
