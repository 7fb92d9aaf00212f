"""Export, report and plots of a finished 4-rank run, read back without MPI (``python -m propulate``).

``programs/results_run.py`` runs two islands of two workers with migration and writes what its loss function
saw and returned to ``truth.json``; the export must hold exactly those evaluations, once each, and the
command-line tool must run on the checkpoint in a plain process that never loads ``mpi4py.MPI``.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from propulate.report import checkpoint_dataframe, load_dataframe, read_checkpoint

from .conftest import REPO, launch

GENERATIONS = 12
WORKERS = 4
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint directory of one finished run, shared by the tests of this module."""
    directory = tmp_path_factory.mktemp("results_run")
    out = launch("results_run.py", WORKERS, "--checkpoint", str(directory), "--generations", str(GENERATIONS))
    assert out.returncode == 0, out.stdout[-8000:]
    return directory


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m propulate ARGS`` as a login node would: no mpiexec, no MPI environment.

    ``-X importtime`` lists every module imported on standard error, so the test can tell MPI never loaded.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI", "HYDRA", "OMPI_"))}
    env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-X", "importtime", "-m", "propulate", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert " mpi4py.MPI" not in done.stderr, "python -m propulate loaded mpi4py.MPI"
    return done


def messages(stderr: str) -> str:
    """Standard error without the ``-X importtime`` lines."""
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("import time:"))


def test_export_has_one_row_per_evaluation(run):
    truth = json.loads((run / "truth.json").read_text())
    assert len(truth) == GENERATIONS * WORKERS
    checkpoint = read_checkpoint(run)
    frame = checkpoint_dataframe(checkpoint)
    # Migration left copies in the populations; each evaluation is still one row.
    assert sum(ind.migration_steps > 0 for ind in checkpoint.population) > 0
    assert len(frame) == len(truth)
    assert frame["number"].tolist() == list(range(len(truth)))
    assert frame["datetime_start"].is_monotonic_increasing
    assert (frame["datetime_complete"] >= frame["datetime_start"]).all()
    assert frame["session"].eq(0).all() and frame["uid"].is_unique
    rows = frame.set_index(["island", "worker", "generation"])
    assert rows.index.is_unique
    for record in truth:
        row = rows.loc[(record["island"], record["worker"], record["generation"])]
        for name, value in record["params"].items():
            assert row[f"params_{name}"] == value, (record, name)
        if record["loss"] is None:
            assert row["state"] == "FAIL" and math.isnan(row["value"]), record
            assert math.isnan(row["user_attrs_accuracy"])
        else:
            assert row["state"] == "COMPLETE" and row["value"] == record["loss"], record
            assert row["user_attrs_accuracy"] == record["accuracy"]
        history = row["migration_history"].split("-")
        assert history[0] == str(record["island"]) and set(history) <= {"0", "1"}
    # The loss function sleeps 0.02 s per evaluation.
    assert (frame["duration"] >= pd.Timedelta(seconds=0.015)).all()
    assert frame["state"].value_counts().to_dict() == {
        state: sum((r["loss"] is None) == (state == "FAIL") for r in truth) for state in set(frame["state"])
    }


def test_report(run):
    done = cli("report", str(run), "--top", "3")
    assert done.returncode == 0, messages(done.stderr)
    text = done.stdout
    truth = json.loads((run / "truth.json").read_text())
    completed = [r["loss"] for r in truth if r["loss"] is not None]
    failed = len(truth) - len(completed)
    assert "latest session: 2 island(s) of sizes [2, 2], 1 rank(s) per worker" in text
    assert f"{len(truth)} finished evaluations by 4 worker(s), 1 session(s)" in text
    assert f"distinct configuration(s) of {len(completed)} completed evaluations" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["#", "number", "loss"])
    assert lines[header].split()[-4:] == ["lr", "layers", "act", "dropout"]
    assert float(lines[header + 1].split()[2]) == pytest.approx(min(completed), rel=1e-5)
    assert re.search(rf"^ +COMPLETE +{len(completed)}$", text, re.MULTILINE), text
    assert re.search(rf"^ +FAIL +{failed}$", text, re.MULTILINE), text
    assert "Evaluations by island" in text and "evaluations per hour" in text
    workers = [line.split() for line in lines if line.split()[:1] in (["0"], ["1"]) and line.endswith("%")]
    assert sorted((w[0], w[1], w[2]) for w in workers) == [(i, k, "12") for i in "01" for k in "01"]
    overall = next(line for line in lines if line.strip().startswith("all"))
    assert 0 < float(overall.split()[-2]) <= 100


def test_export_files(run, tmp_path):
    frame = load_dataframe(run)
    done = cli("export", str(run))
    assert done.returncode == 0, messages(done.stderr)
    assert done.stdout.strip() == f"wrote {len(frame)} rows to {run / 'propulate-results.csv'}"
    csv = pd.read_csv(run / "propulate-results.csv", parse_dates=["datetime_start", "datetime_complete"])
    assert csv["number"].tolist() == frame["number"].tolist()
    pd.testing.assert_series_equal(csv["value"], frame["value"])
    pd.testing.assert_series_equal(csv["params_lr"], frame["params_lr"])
    assert csv["datetime_complete"].tolist() == frame["datetime_complete"].tolist()
    target = tmp_path / "out.json"
    done = cli("export", str(run), "--format", "json", "-o", str(target))
    assert done.returncode == 0, messages(done.stderr)
    records = json.loads(target.read_text())
    assert [r["number"] for r in records] == frame["number"].tolist()
    assert [r["state"] for r in records] == frame["state"].tolist()
    assert [r["params_act"] for r in records] == frame["params_act"].astype(str).tolist()


def test_plot(run, tmp_path):
    done = cli("plot", str(run), "-o", str(tmp_path), "--dpi", "100")
    assert done.returncode == 0, messages(done.stderr)
    for name in ("best_loss.png", "timeline.png", "parameters.png"):
        path = tmp_path / name
        assert f"wrote {path}" in done.stdout
        data = path.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 20_000, (name, len(data))
        # IHDR: width and height, big-endian, right after the signature and the chunk header.
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width >= 800 and height >= 300, (name, width, height)


def test_missing_checkpoint(tmp_path):
    done = cli("report", str(tmp_path))
    assert done.returncode == 1
    assert f"no checkpoint in '{tmp_path}'" in messages(done.stderr)


def test_compact_keeps_every_evaluation(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = pd.read_csv(io.StringIO(cli("export", str(copy), "-o", "-").stdout))
    done = cli("compact", str(copy))
    assert done.returncode == 0, messages(done.stderr)
    assert f"merged {WORKERS} file(s) into one" in done.stdout
    assert sorted(path.name for path in copy.glob("propulate-*.h5")) == ["propulate-merged-s0000.h5"]
    after = pd.read_csv(io.StringIO(cli("export", str(copy), "-o", "-").stdout))
    key = ["uid", "island"]
    pd.testing.assert_frame_equal(
        before.sort_values(key).reset_index(drop=True), after.sort_values(key).reset_index(drop=True)
    )
    assert "nothing to merge" in cli("compact", str(copy)).stdout
    assert cli("compact", str(tmp_path / "empty")).returncode == 1


def test_report_lists_the_metrics(run):
    done = cli("report", str(run), "--top", "3")
    assert done.returncode == 0, messages(done.stderr)
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["#", "number", "loss"])
    assert lines[header].split()[3] == "accuracy"
    loss, accuracy = (float(v) for v in lines[header + 1].split()[2:4])
    assert accuracy == pytest.approx(1.0 / (1.0 + loss), rel=1e-4)


def test_report_html(run, tmp_path):
    pytest.importorskip("plotly")
    target = tmp_path / "report.html"
    done = cli("report", str(run), "--html", str(target))
    assert done.returncode == 0, messages(done.stderr)
    assert f"wrote {target}" in done.stdout
    text = target.read_text()
    found = dict(re.findall(r'<section id="([a-z-]+)">(.*?)</section>', text, flags=re.DOTALL))
    assert list(found) == [
        "best-loss",
        "top",
        "parallel",
        "parameters",
        "timeline",
        "migration",
        "interim",
        "failures",
    ]
    for key in ("best-loss", "parallel", "parameters", "timeline", "migration", "interim"):
        assert 'class="plotly-graph-div"' in found[key], key
    assert "<th>accuracy</th>" in found["top"]
    truth = json.loads((run / "truth.json").read_text())
    failed = sum(r["loss"] is None for r in truth)
    assert (
        f"{failed:,} failed evaluation(s)" in found["failures"] if failed else "No evaluation failed" in text
    )
    assert not re.search(r"<script[^>]*\ssrc=", text)
    # The same checkpoint gives the same file.
    again = tmp_path / "again.html"
    assert cli("report", str(run), "--html", str(again)).returncode == 0
    assert again.read_text() == text
