"""Export, report and figures on one process (propulate/report/, __main__.py), no checkpoint needed."""

from __future__ import annotations

import io
import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from propulate.__main__ import main
from propulate.checkpoint import Checkpoint, make_uid
from propulate.individual import Individual, Status
from propulate.report.frame import checkpoint_dataframe, to_dataframe, write_csv, write_json
from propulate.report.summary import (
    best,
    evaluations_per_hour,
    island_summary,
    repeated,
    session_spans,
    status_counts,
    time_unit,
    utilization,
)
from propulate.report.text import format_report
from propulate.space import SearchSpace

REPO = Path(__file__).resolve().parents[2]
LIMITS = {"lr": (1e-4, 1e-1), "act": ("relu", "tanh", "gelu"), "layers": (1, 8)}
T0 = 1_700_000_000.0  # epoch seconds of the first evaluation


def individual(
    island: int,
    worker: int,
    generation: int,
    start: float,
    period: float,
    loss: float = 1.0,
    status: Status = Status.COMPLETED,
    session: int = 0,
    params: dict | None = None,
) -> Individual:
    """An individual bred by ``(island, worker)``, evaluated from ``T0 + start`` for ``period`` seconds."""
    ind = Individual(
        params or {"lr": 0.01, "act": "tanh", "layers": 3}, LIMITS, generation=generation, rank=worker
    )
    ind.island = island
    ind.migration_history = str(island)
    ind.uid = make_uid(session, 2 * island + worker, generation)
    ind.status = status
    ind.loss = loss
    ind.evaltime = T0 + start + period
    ind.evalperiod = period
    return ind


def migrant(ind: Individual, target: int, counter: int) -> Individual:
    """A copy sent to island ``target``, as ``Propulator._emigrate`` makes it."""
    copy = ind.copy()
    copy.uid = make_uid(0, 100, counter)
    copy.active = True
    copy.migration_steps += 1
    copy.migration_history += f"-{target}"
    return copy


@pytest.fixture
def population() -> list[Individual]:
    """Two islands of two workers; a migration chain, a pollination branch, a failure and a pruning."""
    a = individual(0, 0, 0, 0.0, 2.0, loss=0.5, params={"lr": 0.02, "act": "relu", "layers": 2})
    b = individual(0, 1, 0, 0.5, 1.0, loss=0.25, params={"lr": 0.03, "act": "gelu", "layers": 5})
    c = individual(1, 0, 0, 0.2, 3.0, loss=math.nan, status=Status.FAILED)
    d = individual(1, 1, 0, 0.1, 1.0, loss=2.0, status=Status.PRUNED)
    d.metrics = {"epochs": 3.0}
    e = individual(0, 1, 1, 1.5, 2.0, loss=0.125, params={"lr": 0.001, "act": "tanh", "layers": 8})
    e.metrics = {"accuracy": 0.9}
    a.active = False  # it emigrated: only its copy on island 1 is active
    a1 = migrant(a, 1, 0)
    a10 = migrant(a1, 0, 1)  # and back
    a10.active = False
    b1 = migrant(b, 1, 2)  # pollination: two copies of b
    b12 = migrant(b1, 2, 3)
    b2 = migrant(b, 2, 4)
    return [a, b, c, d, e, a1, a10, b1, b12, b2]


def test_one_row_per_evaluation(population):
    frame = to_dataframe(population)
    assert len(frame) == 5
    # Numbered by start time.
    assert frame["number"].tolist() == list(range(5))
    assert frame["datetime_start"].is_monotonic_increasing
    assert frame[["island", "worker", "generation"]].values.tolist() == [
        [0, 0, 0],
        [1, 1, 0],
        [1, 0, 0],
        [0, 1, 0],
        [0, 1, 1],
    ]
    a, d, c, b, e = (frame.iloc[i] for i in range(5))
    assert a["migration_history"] == "0-1-0"
    assert a["active"]  # its copy on island 1 is
    assert a["uid"] == population[0].uid
    assert b["migration_history"] == "0-1-2 0-2"
    assert e["migration_history"] == "0"
    assert frame["state"].tolist() == ["COMPLETE", "PRUNED", "FAIL", "COMPLETE", "COMPLETE"]
    assert math.isnan(c["value"])  # failed: no value
    assert d["value"] == 2.0  # pruned: the last interim loss
    assert a["value"] == 0.5 and e["value"] == 0.125
    assert a["params_lr"] == 0.02 and a["params_act"] == "relu" and a["params_layers"] == 2
    assert a["datetime_start"] == pd.Timestamp(T0, unit="s", tz="UTC")
    assert a["datetime_complete"] == pd.Timestamp(T0 + 2.0, unit="s", tz="UTC")
    assert a["duration"] == pd.Timedelta(seconds=2)
    assert d["user_attrs_epochs"] == 3.0 and math.isnan(a["user_attrs_epochs"])
    assert e["user_attrs_accuracy"] == 0.9
    assert frame["session"].tolist() == [0] * 5
    assert list(frame.columns[:5]) == ["number", "value", "datetime_start", "datetime_complete", "duration"]
    assert frame.index.tolist() == frame["number"].tolist()


def test_parameters_decoded_like_individuals():
    rng = random.Random(3)
    inds = []
    for i in range(200):
        # Arbitrary embeddings, as particle swarms leave them: ints between integers, one-hot blocks blurred.
        position = np.array([rng.uniform(-0.1, 0.2), *(rng.random() for _ in range(3)), rng.uniform(0, 9)])
        ind = Individual(position, LIMITS, generation=i, rank=0)
        ind.uid, ind.island, ind.evaltime, ind.evalperiod = i, 0, T0 + i, 0.5
        ind.status, ind.loss = Status.COMPLETED, rng.random()
        inds.append(ind)
    frame = to_dataframe(inds)
    for ind, (_, row) in zip(inds, frame.iterrows(), strict=True):
        assert {name: row[f"params_{name}"] for name in LIMITS} == ind.params()
    assert frame["params_act"].dtype.name == "category"
    assert list(frame["params_act"].cat.categories) == ["relu", "tanh", "gelu"]
    assert frame["params_layers"].dtype.kind == "i"


def test_ties_in_start_time_are_broken_by_uid():
    inds = [individual(0, w, 0, 1.0, 1.0) for w in (1, 0)]
    frame = to_dataframe(inds)
    assert frame["uid"].tolist() == sorted(ind.uid for ind in inds)


def test_empty_and_mixed_spaces():
    frame = to_dataframe([], SearchSpace.of(LIMITS))
    assert len(frame) == 0
    assert {"params_lr", "params_act", "params_layers", "state", "migration_history"} <= set(frame.columns)
    assert "no finished evaluations" in format_report(frame)
    other = Individual({"x": 1.0}, {"x": (0.0, 2.0)})
    with pytest.raises(ValueError, match="different search spaces"):
        to_dataframe([individual(0, 0, 0, 0.0, 1.0), other])


def test_interrupted_evaluations_are_listed_on_request():
    done = individual(0, 0, 0, 0.0, 1.0)
    cut = individual(0, 0, 1, 0.0, 0.0, loss=math.inf, status=Status.INTERRUPTED)
    cut.evaltime = math.inf
    frame = to_dataframe([cut, done])
    assert frame["state"].tolist() == ["COMPLETE", "WAITING"]  # unfinished ones last
    assert pd.isna(frame["datetime_start"].iloc[1]) and math.isnan(frame["value"].iloc[1])
    assert status_counts(frame).to_dict() == {"COMPLETE": 1, "PRUNED": 0, "FAIL": 0, "WAITING": 1}
    report = format_report(frame)
    assert "1 evaluation(s) cut short by the end of the job" in report


def test_checkpoint_dataframe(population):
    cut = individual(1, 1, 1, 0.0, 0.0, loss=math.inf, status=Status.INTERRUPTED)
    cut.evaltime = math.inf
    populations = {0: population[:3] + population[6:], 1: population[3:6]}
    checkpoint = Checkpoint(
        Path("ckpt"), {}, SearchSpace.of(LIMITS), populations=populations, pending={1: [cut]}
    )
    assert checkpoint_dataframe(checkpoint).equals(to_dataframe(population))
    frame = checkpoint_dataframe(checkpoint, include_interrupted=True)
    assert len(frame) == 6 and frame["state"].iloc[-1] == "WAITING" and frame["generation"].iloc[-1] == 1


def resumed_run() -> list[Individual]:
    """Session 0: two workers for 10 s; an hour's break; session 1: one worker for 4 s.

    Worker (0, 1)'s last evaluation of session 0 was cut short and is redone first in session 1.
    """
    inds = [individual(0, 0, g, 2.0 * g, 2.0) for g in range(5)]  # busy 10 of 10 s
    inds += [individual(0, 1, g, 2.0 * g + 0.5, 1.0) for g in range(4)]  # busy 4 of 10 s (ends at 6.5 s)
    inds[-1].evaltime = T0 + 10.0  # its last one ends at 10 s
    inds[-1].evalperiod = 10.0 - 6.5
    redone = individual(0, 1, 4, 3610.0, 1.0)  # bred in session 0, evaluated in session 1
    later = [individual(0, 1, 5 + g, 3611.0 + g, 1.0, session=1) for g in range(3)]
    return [*inds, redone, *later]


def test_sessions_throughput_and_utilization():
    frame = to_dataframe(resumed_run())
    assert frame["session"].tolist() == [0] * 9 + [1] * 4  # the redone evaluation ran in session 1
    spans = session_spans(frame)
    assert spans["span_s"].tolist() == [10.0, 4.0]
    assert spans["workers"].tolist() == [2, 1]
    assert spans["evaluations"].tolist() == [9, 4]
    assert evaluations_per_hour(frame) == pytest.approx(13 * 3600 / 14.0)
    per_worker, overall = utilization(frame)
    busy = {(0, 0): 10.0, (0, 1): 3.0 + 3.5 + 4.0}
    available = {(0, 0): 10.0, (0, 1): 14.0}
    for key in busy:
        assert per_worker.loc[key, "busy_s"] == pytest.approx(busy[key])
        assert per_worker.loc[key, "available_s"] == pytest.approx(available[key])
        assert per_worker.loc[key, "utilization"] == pytest.approx(busy[key] / available[key])
    assert overall == pytest.approx(sum(busy.values()) / sum(available.values()))
    report = format_report(frame)
    assert "Sessions (a resumed run has several; times in UTC)" in report
    assert "13 finished evaluations by 2 worker(s), 2 session(s)" in report


def test_best_counts_and_islands(population):
    frame = to_dataframe(population)
    top_two = best(frame, 2)
    assert top_two["value"].tolist() == [0.125, 0.25]
    twice = to_dataframe(
        [*population[:5], individual(0, 0, 7, 9.0, 1.0, loss=0.125, params=population[4].params())]
    )
    assert best(twice, 5)["value"].tolist() == [0.125, 0.25, 0.5]  # one row per configuration
    assert len(best(twice, 5, distinct=False)) == 4
    # c and d, bred on island 1, have the same parameters; the last of ``twice`` repeats e on island 0.
    assert repeated(frame) == (1, 1)
    assert repeated(twice) == (2, 2)
    elsewhere = to_dataframe(
        [*population[:5], individual(1, 0, 7, 9.0, 1.0, loss=0.5, params=population[4].params())]
    )
    assert repeated(elsewhere) == (1, 2)  # e's configuration again, but bred on island 1
    with pytest.raises(ValueError, match="n: expected a positive integer"):
        best(frame, 0)
    assert status_counts(frame).to_dict() == {"COMPLETE": 3, "PRUNED": 1, "FAIL": 1}
    islands = island_summary(frame)
    assert islands["evaluations"].to_dict() == {0: 3, 1: 2}
    assert islands["fail"].to_dict() == {0: 0, 1: 1}
    assert islands.loc[0, "best_value"] == 0.125 and math.isnan(islands.loc[1, "best_value"])


def test_report_text(population):
    report = format_report(to_dataframe(population), top=2, title="my run")
    lines = report.splitlines()
    assert lines[:2] == ["my run", "======"]
    assert "Best 2 distinct configuration(s) of 3 completed evaluations" in report
    table = lines.index("Best 2 distinct configuration(s) of 3 completed evaluations")
    assert lines[table + 1].split() == [
        "#",
        "number",
        "loss",
        "accuracy",  # the loss function's metrics right after the loss
        "island",
        "worker",
        "generation",
        "lr",
        "act",
        "layers",
    ]
    assert lines[table + 2].split() == ["1", "4", "0.125", "0.9", "0", "1", "1", "0.001", "tanh", "8"]
    assert re.search(r"^ +COMPLETE +3$", report, re.MULTILINE) and re.search(
        r"^ +FAIL +1$", report, re.MULTILINE
    )
    assert "evaluations per hour of wall-clock time while running" in report
    overall = next(line for line in lines if line.strip().startswith("all"))
    # Busy 2 + 1 + 3 + 1 + 2 s of 4 workers x 3.5 s.
    assert overall.split() == ["all", "5", "9", "14", f"{100 * 9 / 14:.1f}", "%"]


def test_time_unit():
    assert time_unit(59.0) == (1.0, "s")
    assert time_unit(600.0) == (60.0, "min")
    assert time_unit(86400.0) == (3600.0, "h")


def test_csv_and_json_round_trip(population, tmp_path):
    frame = to_dataframe(population)
    write_csv(frame, tmp_path / "r.csv")
    write_json(frame, tmp_path / "r.json")
    back = pd.read_csv(tmp_path / "r.csv", parse_dates=["datetime_start", "datetime_complete"])
    assert back.columns.tolist() == frame.columns.tolist()
    assert back["datetime_start"].tolist() == frame["datetime_start"].tolist()
    assert (pd.to_timedelta(back["duration"]) == frame["duration"]).all()
    pd.testing.assert_series_equal(back["value"], frame["value"])
    assert back["params_act"].tolist() == frame["params_act"].astype(str).tolist()
    assert back["migration_history"].tolist() == frame["migration_history"].tolist()
    records = json.loads((tmp_path / "r.json").read_text())
    assert len(records) == 5 and records[0]["params_act"] == "relu" and records[2]["value"] is None
    assert pd.Timestamp(records[0]["datetime_start"]) == frame["datetime_start"].iloc[0]
    loaded = pd.read_json(tmp_path / "r.json", orient="records")
    assert loaded["params_lr"].tolist() == pytest.approx(frame["params_lr"].tolist(), rel=1e-14)
    stream = io.StringIO()
    write_csv(frame, stream)
    assert stream.getvalue() == (tmp_path / "r.csv").read_text()


@pytest.mark.slow
def test_figures(population, tmp_path):
    from matplotlib.image import imread

    from propulate.report.plots import save_figures

    frame = to_dataframe(resumed_run() + population[5:])
    paths = save_figures(frame, tmp_path / "figs", dpi=80)
    assert [p.name for p in paths] == ["best_loss.png", "timeline.png", "parameters.png"]
    for path in paths:
        image = imread(path)
        height, width = image.shape[:2]
        assert width >= 600 and height >= 240, (path.name, image.shape)
        assert path.stat().st_size > 15_000, path.name
        assert image[..., :3].std() > 0.05, f"{path.name} is blank"
    with pytest.raises(ValueError, match="dpi"):
        save_figures(frame, tmp_path, dpi=0)
    empty = to_dataframe([], SearchSpace.of(LIMITS))
    assert len(save_figures(empty, tmp_path / "empty")) == 3


def test_missing_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r'pip install "propulate\[export\]"'):
        to_dataframe([])
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    from propulate.report import plots

    with pytest.raises(ImportError, match=r'pip install "propulate\[plot\]"'):
        plots._figure(1.0, 1.0)


def test_command_line_errors(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 1
    assert "no checkpoint in" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "missing")]) == 1
    assert "is not a directory" in capsys.readouterr().err
    for argv in ([], ["report"], ["export", str(tmp_path), "--format", "xml"], ["report", ".", "--top", "x"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2, argv
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    assert "report" in capsys.readouterr().out


def test_no_mpi_and_no_pyplot_on_import():
    code = (
        "import sys, propulate.__main__, propulate.report, propulate.report.plots; "
        "assert 'mpi4py.MPI' not in sys.modules, 'MPI loaded'; "
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def synthetic(n: int, workers: int = 64, seed: int = 0) -> list[Individual]:
    """``n`` evaluations by ``workers`` workers in islands of 8; one in ten also has a migrated copy."""
    rng = np.random.default_rng(seed)
    space = SearchSpace.of(LIMITS)
    positions = np.zeros((n, space.ndim))
    positions[:, 0] = rng.uniform(1e-4, 0.1, n)
    positions[np.arange(n), 1 + rng.integers(0, 3, n)] = 1.0
    positions[:, 4] = rng.integers(1, 9, n)
    periods = rng.uniform(1.0, 5.0, n)
    failed = rng.random(n) < 0.1
    losses, accuracies, copied = rng.random(n), rng.random(n), rng.random(n) < 0.1
    clock = np.zeros(workers)
    inds = []
    for i in range(n):
        w, generation = i % workers, i // workers
        ind = Individual(positions[i], space, generation=generation, rank=w % 8)
        ind.island, ind.uid, ind.migration_history = w // 8, make_uid(0, w, generation), str(w // 8)
        ind.evaltime, ind.evalperiod = T0 + clock[w] + periods[i], periods[i]
        ind.status = Status.FAILED if failed[i] else Status.COMPLETED
        ind.loss = math.nan if failed[i] else losses[i]
        ind.metrics = {"accuracy": accuracies[i]}
        clock[w] += periods[i] + 0.1
        inds.append(ind)
        if copied[i]:
            inds.append(migrant(ind, (w // 8 + 1) % 8, i))
    return inds


@pytest.mark.slow
def test_report_on_100k_individuals():
    # How long this takes is measured by benchmarks/suite.py (`python -m propulate report` on a checkpoint
    # of 100,000 evaluations), not here; this checks that the counts hold at that size.
    frame = to_dataframe(synthetic(100_000))
    report = format_report(frame)
    assert len(frame) == 100_000 and "100000 finished evaluations by 64 worker(s)" in report
