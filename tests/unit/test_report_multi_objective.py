"""The report, plots, HTML report and export of a run with several objectives (propulate/report/,
__main__.py), on hand-made individuals and on a checkpoint of a 1-rank run; no mpiexec.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import re

import numpy as np
import pandas as pd
import pytest

from propulate import Individual, Propulator
from propulate.__main__ import main
from propulate.checkpoint import make_uid
from propulate.individual import Status
from propulate.objectives import Objectives, hypervolume, pareto_front
from propulate.propagators import NSGA2
from propulate.report.frame import interim_losses, load_dataframe, to_dataframe
from propulate.report.fronts import hypervolume_history, objectives_of, pareto_front_rows
from propulate.report.summary import island_summary
from propulate.report.text import format_report

LIMITS = {"x": (0.0, 1.0), "y": (0.0, 1.0), "act": ("relu", "tanh")}
NAMED = {"error": "minimize", "throughput": "maximize"}
T0 = 1_700_000_000.0


def returned(params: dict) -> dict[str, float]:
    """What the loss function returns: two objectives in conflict, one maximized, and a metric."""
    error = params["x"] + 0.1 * (params["act"] == "tanh")
    return {"error": error, "throughput": math.sqrt(params["x"]) - params["y"], "memory": 10 * params["y"]}


def evaluation(
    goals: Objectives, worker: int, generation: int, params: dict, status: Status = Status.COMPLETED
) -> Individual:
    """An evaluation by worker ``worker`` of island 0, ending at ``T0 + generation + 1``."""
    ind = Individual(params, LIMITS, generation=generation, rank=worker)
    ind.island, ind.migration_history = 0, "0"
    ind.uid = make_uid(0, worker, generation)
    ind.status = status
    if status is Status.COMPLETED:
        values = returned(params)
        ind.losses, ind.metrics = goals.interpret(values if goals.named else list(values.values())[:2])
        ind.loss = ind.losses[0]
    else:
        ind.loss = math.nan
    # Workers finish in turn, a tenth of a second apart.
    ind.evaltime, ind.evalperiod = T0 + generation + 1.0 + 0.1 * worker, 0.9
    return ind


def run(objectives=NAMED, n: int = 60, seed: int = 0) -> list[Individual]:
    """``n`` evaluations by three workers: random configurations, one failed, one repeated exactly."""
    goals = Objectives.of(objectives)
    rng = random.Random(seed)
    inds = []
    for i in range(n):
        params = {"x": rng.random(), "y": rng.random() * 0.3, "act": rng.choice(("relu", "tanh"))}
        inds.append(evaluation(goals, i % 3, i // 3, params, Status.FAILED if i == 7 else Status.COMPLETED))
    # A later evaluation of a configuration on the front: the front lists it once, as its first evaluation.
    first = pareto_front(inds)[0]
    inds.append(evaluation(goals, 0, n // 3 + 1, first.params()))
    return inds


@pytest.fixture
def named() -> tuple[list[Individual], pd.DataFrame]:
    """A run with a minimized and a maximized objective, and its frame."""
    inds = run()
    return inds, to_dataframe(inds, objectives=NAMED)


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(a <= b) and np.any(a < b))


def test_report_names_the_objectives_and_lists_the_front(named):
    inds, frame = named
    report = format_report(frame, objectives=NAMED)
    assert "Best" not in report and "loss" not in report
    front = pareto_front_rows(frame, NAMED)
    n_complete = len(inds) - 1
    assert (
        f"Pareto front: {len(front)} distinct non-dominated configuration(s) of {n_complete} completed"
        in report
    )
    assert "objectives: error (min), throughput (max); sorted by error (min), best first" in report
    lines = report.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "number"])
    assert lines[header].split() == [
        "#", "number", "error", "(min)", "throughput", "(max)", "memory", "island", "worker", "generation",
        "x", "y", "act",
    ]  # fmt: skip
    rows = [line.split() for line in lines[header + 1 : header + 1 + len(front)]]
    assert [int(row[1]) for row in rows] == front["number"].tolist()
    # Values as the loss function returned them: the maximized throughput not negated.
    for row, (_, expected) in zip(rows, front.iterrows(), strict=True):
        assert float(row[2]) == pytest.approx(expected["values_0"], rel=1e-5)
        assert float(row[3]) == pytest.approx(expected["values_1"], rel=1e-5, abs=1e-6)
    islands = island_summary(frame, NAMED)
    assert islands.loc[0, "on_front"] == len(front)
    assert islands.loc[0, "best_throughput"] == frame["values_1"].max()  # maximized: the largest
    assert islands.loc[0, "best_error"] == frame["values_0"].min()


def test_front_rows_are_exactly_the_non_dominated_completed_evaluations(named):
    inds, frame = named
    front = pareto_front_rows(frame, NAMED)
    assert set(front["uid"]) == {ind.uid for ind in pareto_front(inds)}
    # By definition, without moocore: nothing completed dominates a front row, everything else is dominated.
    complete = frame[frame["state"] == "COMPLETE"]
    points = complete[["values_0", "values_1"]].to_numpy() * np.array([1.0, -1.0])
    non_dominated = [not any(dominates(q, p) for q in points) for p in points]
    expected = complete.loc[non_dominated].drop_duplicates(["params_x", "params_y", "params_act"])
    assert sorted(front["number"]) == sorted(expected["number"])
    assert front["values_0"].is_monotonic_increasing  # sorted by the first objective
    # The later evaluation of a configuration on the front is not listed again.
    params = ["params_x", "params_y", "params_act"]
    repeated = frame.iloc[-1]
    assert (front[params] == repeated[params]).all(axis=1).sum() == 1
    assert repeated["number"] not in front["number"].tolist() and repeated["state"] == "COMPLETE"
    assert "FAIL" in frame["state"].tolist() and (front["state"] == "COMPLETE").all()
    capped = format_report(frame, top=2, objectives=NAMED)
    assert f"the first 2 of {len(front)} shown" in capped


def test_hypervolume_over_time(named):
    _, frame = named
    history = hypervolume_history(frame, NAMED)
    complete = frame[frame["state"] == "COMPLETE"]
    assert len(history) == 10 and history["completed"].iloc[-1] == len(complete)
    assert history["completed"].tolist() == [math.ceil(i * len(complete) / 10) for i in range(1, 11)]
    assert history["hypervolume"].is_monotonic_increasing and history["hypervolume"].iloc[0] > 0
    # The default reference point: each objective's worst completed value (minimized) plus 10 % of its range.
    minimized = complete[["values_0", "values_1"]].to_numpy() * np.array([1.0, -1.0])
    span = minimized.max(axis=0) - minimized.min(axis=0)
    reference = minimized.max(axis=0) + 0.1 * span
    assert history.attrs["reference"] == pytest.approx(reference)
    front = pareto_front_rows(frame, NAMED)
    points = front[["values_0", "values_1"]].to_numpy() * np.array([1.0, -1.0])
    assert history["hypervolume"].iloc[-1] == pytest.approx(hypervolume(points, reference), rel=1e-12)
    assert history["front_size"].iloc[-1] == len(front)
    # Each point is the hypervolume of the evaluations completed so far.
    order = complete.sort_values(["datetime_complete", "number"])
    for k, volume in zip(history["completed"], history["hypervolume"], strict=True):
        first = order.head(k)[["values_0", "values_1"]].to_numpy() * np.array([1.0, -1.0])
        assert volume == pytest.approx(hypervolume(first, reference), rel=1e-12)

    report = format_report(frame, objectives=NAMED)
    stated = re.search(
        r"reference point: error \(min\) (\S+), throughput \(max\) (\S+) \(default: (.*)\)", report
    )
    assert stated, report
    assert [float(stated[1]), -float(stated[2])] == pytest.approx(reference, rel=1e-5)
    assert stated[3] == "10 % of each objective's range beyond its worst completed value"
    table = report.split("hypervolume\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [float(line.split()[-1]) for line in table] == pytest.approx(
        history["hypervolume"].tolist(), rel=1e-5
    )


def test_reference_point_option(named):
    _, frame = named
    default = hypervolume_history(frame, NAMED)["hypervolume"].iloc[-1]
    # In each objective's own direction: error below 2, throughput above -1.
    given = hypervolume_history(frame, NAMED, reference=[2.0, -1.0])
    front = pareto_front_rows(frame, NAMED)
    points = front[["values_0", "values_1"]].to_numpy() * np.array([1.0, -1.0])
    assert given.attrs["reference"] == (2.0, 1.0)
    assert given["hypervolume"].iloc[-1] == pytest.approx(hypervolume(points, (2.0, 1.0)))
    assert given["hypervolume"].iloc[-1] != pytest.approx(default)
    report = format_report(frame, objectives=NAMED, reference=[2.0, -1.0])
    assert "reference point: error (min) 2, throughput (max) -1 (given)" in report
    assert report != format_report(frame, objectives=NAMED)
    with pytest.raises(ValueError, match="reference: expected 2 finite numbers"):
        hypervolume_history(frame, NAMED, reference=[1.0])
    beyond = format_report(frame, objectives=NAMED, reference=[-5.0, 5.0])
    assert "no completed evaluation dominates the reference point" in beyond


def test_unnamed_objectives_and_three_objectives(tmp_path):
    two = to_dataframe(run(objectives=2))
    assert objectives_of(two).names == ("values_0", "values_1")  # from the columns: all minimized
    assert "objectives: values_0 (min), values_1 (min)" in format_report(two)
    three = {"error": "minimize", "throughput": "maximize", "memory": "minimize"}
    goals = Objectives.of(three)
    inds = []
    for ind in run():
        if ind.status is Status.COMPLETED:
            ind.losses, _ = goals.interpret(returned(ind.params()))
        inds.append(ind)
    frame = to_dataframe(inds, objectives=three)
    report = format_report(frame, objectives=three)
    assert "error (min), throughput (max), memory (min)" in report
    assert set(pareto_front_rows(frame, three)["uid"]) == {ind.uid for ind in pareto_front(inds)}
    from propulate.report.plots import plot_front

    fig = plot_front(frame, three)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in panels] == [
        ("error (min)", "throughput (max)"),
        ("error (min)", "memory (min)"),
        ("throughput (max)", "memory (min)"),
    ]


@pytest.mark.slow
def test_plots(named, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    from propulate.report.plots import (
        plot_best_loss,
        plot_front,
        plot_hypervolume,
        plot_parameters,
        save_figures,
    )

    _, frame = named
    paths = save_figures(frame, tmp_path, dpi=60, objectives=NAMED)
    assert [p.name for p in paths] == ["front.png", "hypervolume.png", "timeline.png", "parameters.png"]
    for path in paths:
        assert imread(path)[..., :3].std() > 0.05, f"{path.name} is blank"
    front = plot_front(frame, NAMED)
    ax = front.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("error (min)", "throughput (max)")
    # The highlighted points are the front's, as returned (throughput not negated).
    rows = pareto_front_rows(frame, NAMED)
    highlighted = next(c for c in ax.collections if c.get_label() == "Pareto front").get_offsets()
    assert np.asarray(highlighted).tolist() == rows[["values_0", "values_1"]].to_numpy().tolist()
    staircase = ax.get_lines()[0].get_xydata()
    assert len(staircase) == 2 * len(rows) - 1
    hv = plot_hypervolume(frame, NAMED)
    assert "reference point error (min)" in hv.get_suptitle()
    steps = hv.axes[0].get_lines()[0].get_ydata()
    assert len(steps) == (frame["state"] == "COMPLETE").sum() and np.all(np.diff(steps) >= 0)
    parameters = plot_parameters(frame, objectives=NAMED)
    assert parameters.axes[0].get_ylabel() == "error (min), the first objective"
    with pytest.raises(ValueError, match="several objectives"):
        plot_best_loss(frame)


def test_html_report(named, tmp_path):
    pytest.importorskip("plotly")
    from propulate.report.html import MULTI_OBJECTIVE_SECTIONS, build_html

    inds, frame = named
    text = build_html(frame, interim_losses(inds), objectives=NAMED, reference=[2.0, -1.0])
    found = dict(re.findall(r'<section id="([a-z-]+)">(.*?)</section>', text, flags=re.DOTALL))
    assert list(found) == list(MULTI_OBJECTIVE_SECTIONS)
    assert 'class="plotly-graph-div"' in found["front"] and 'class="plotly-graph-div"' in found["hypervolume"]
    header = re.findall(r"<th>(.*?)</th>", found["front-table"])
    assert header[:4] == ["number", "error (min)", "throughput (max)", "memory"]
    front = pareto_front_rows(frame, NAMED)
    assert [int(n) for n in re.findall(r"<tr><td>(\d+)</td>", found["front-table"])] == front[
        "number"
    ].tolist()
    assert "error (min) 2, throughput (max) -1 (given)" in found["hypervolume"]
    data = json.loads(re.search(r"id='report-data'>(.*?)</script>", text)[1])
    history = hypervolume_history(frame, NAMED, reference=[2.0, -1.0])
    assert data["hypervolume"] == pytest.approx(history["hypervolume"].iloc[-1])
    assert data["front"] == len(front) and data["objectives"] == ["error (min)", "throughput (max)"]
    assert data["reference"] == [2.0, -1.0]


@pytest.mark.slow
def test_html_report_renders_in_a_browser(named, tmp_path):
    pytest.importorskip("plotly")
    from propulate.report.html import write_html

    from ..browser import launch, open_offline

    _, frame = named
    path = write_html(frame, tmp_path / "r.html", objectives=NAMED)
    with launch() as browser:
        errors: list[str] = []
        page, escaped = open_offline(browser, path, errors)
        assert not errors and not escaped
        for section in ("front", "hypervolume", "parallel", "parameters"):
            assert page.locator(f"#{section} .main-svg").count() >= 1, section
        page.context.close()


def test_single_objective_report_unchanged():
    """The text of a single-objective report as it was before several objectives were reported."""
    rng = random.Random(1)
    inds = []
    for i in range(9):
        params = {"x": rng.random(), "y": rng.random(), "act": ("relu", "tanh")[i % 2]}
        ind = Individual(params, LIMITS, generation=i // 3, rank=i % 3)
        ind.island, ind.migration_history, ind.uid = i % 2, str(i % 2), make_uid(0, i % 3, i // 3)
        ind.status = (Status.COMPLETED, Status.COMPLETED, Status.PRUNED, Status.FAILED)[i % 4]
        ind.loss = math.nan if ind.status is Status.FAILED else params["x"]
        ind.metrics = {"accuracy": 1.0 - params["y"]} if i % 3 != 2 else {}
        ind.evaltime, ind.evalperiod = T0 + i + 1.0, 0.5 + 0.1 * i
        inds.append(ind)
    report = format_report(to_dataframe(inds), top=3, title="single", notes=["a note"])
    assert report == SINGLE


SINGLE = """\
single
======
a note
9 finished evaluations by 6 worker(s), 1 session(s)
from 2023-11-14 22:13:20 to 2023-11-14 22:13:29 UTC, 8.5 s of wall-clock time while running

Best 3 distinct configuration(s) of 5 completed evaluations
   #  number      loss  accuracy  island  worker  generation         x         y  act
   1       4 0.0938596  0.971653       0       1           1 0.0938596 0.0283475 relu
   2       0  0.134364  0.152566       0       0           0  0.134364  0.847434 relu
   3       8  0.228762       NaN       0       2           2  0.228762  0.945271 relu

Evaluations by state
  COMPLETE    5
  PRUNED      2
  FAIL        2
  0 repeated a configuration evaluated before on their island (0 in all islands)

Evaluations by island (where they were bred)
   island  evaluations  complete  pruned  fail  best_value
        0            5         3       2     0   0.0938596
        1            4         2       0     2    0.763775

Throughput: 3,812 evaluations per hour of wall-clock time while running

Worker utilization: time evaluating / time of the sessions the worker evaluated in
  island worker  evaluations  busy [s]  available [s] utilization
       0      0            2       1.6            8.5      18.8 %
       0      1            1       0.9            8.5      10.6 %
       0      2            2         2            8.5      23.5 %
       1      0            1       0.8            8.5       9.4 %
       1      1            2       1.8            8.5      21.2 %
       1      2            1         1            8.5      11.8 %
     all                   9       8.1             51      15.9 %
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """The checkpoint of a 1-rank NSGA-II run with a minimized and a maximized objective."""
    directory = tmp_path_factory.mktemp("run")

    def loss_fn(params):
        return returned(params)

    propagator = NSGA2(LIMITS, pop_size=8, rng=random.Random(0))
    Propulator(
        loss_fn, propagator, rng=random.Random(1), generations=30, checkpoint_path=directory, objectives=NAMED
    ).propulate()
    return str(directory)


@pytest.mark.slow
def test_command_line_on_a_checkpoint(checkpoint, tmp_path, capsys):
    assert main(["report", checkpoint]) == 0
    report = capsys.readouterr().out
    assert (
        "objectives: error (min), throughput (max)" in report and "Hypervolume of the Pareto front" in report
    )
    frame = load_dataframe(checkpoint)
    front = pareto_front_rows(frame, NAMED)
    assert f"Pareto front: {len(front)} distinct" in report
    assert main(["report", checkpoint, "--reference", "2", "-1"]) == 0
    assert "(given)" in capsys.readouterr().out
    assert main(["report", checkpoint, "--reference", "2"]) == 2
    assert "--reference: expected 2 numbers" in capsys.readouterr().err
    assert main(["plot", checkpoint, "-o", str(tmp_path / "figs"), "--dpi", "40"]) == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "front.png",
        "hypervolume.png",
        "parameters.png",
        "timeline.png",
    ]
    capsys.readouterr()
    if importlib.util.find_spec("plotly") is not None:
        assert main(["report", checkpoint, "--html", str(tmp_path / "r.html")]) == 0
        assert "Configurations on the Pareto front" in (tmp_path / "r.html").read_text()


def test_export_keeps_the_values_columns(checkpoint, tmp_path):
    for fmt in ("csv", "json"):
        path = tmp_path / f"r.{fmt}"
        assert main(["export", checkpoint, "--format", fmt, "-o", str(path)]) == 0
        back = pd.read_csv(path) if fmt == "csv" else pd.read_json(path, orient="records")
        assert {"values_0", "values_1"} <= set(back.columns) and "value" not in back.columns
        assert len(back) == 30 and (back["values_1"] != 0).any()
