"""The report of a run as one self-contained HTML file (``python -m propulate report --html FILE``).

The file needs no server and fetches nothing when opened: plotly.js is embedded once, inline, and every
figure is a plotly figure (interactive: zoom, hover, hide a series by clicking its legend entry). Its
sections, each an element with a stable ``id`` holding a plotly figure or a table:

``best-loss``
    The best loss so far against finished evaluations and against wall-clock time while running.
``top``
    The best distinct configurations with their metrics (the ``user_attrs_<name>`` columns).
``pbt``
    Only for a population-based training (:mod:`propulate.pbt`; :data:`PBT_SECTIONS`): each numeric
    hyperparameter against the steps trained, one line per member, the schedule that trained the best
    member's state drawn over them, and that schedule as a table (:mod:`propulate.report.lineage`).
``parallel``
    Parallel coordinates of the parameters, each line one completed evaluation colored by its loss.
``parameters``
    The loss against each parameter; logarithmic axes for parameters declared with ``log=True``.
``timeline``
    Each worker's evaluations over time, one segment per evaluation colored by its state; consecutive
    evaluations of a worker alternate in shade, so back-to-back ones stay apart.
``migration``
    How many individuals moved from each island to each other one (from ``migration_history``).
``interim``
    The interim losses of generator loss functions, pruned runs marked where they were stopped. A checkpoint
    holds them only when the run used a surrogate that records learning curves
    (:func:`propulate.report.frame.interim_losses`).
``failures``
    The failed evaluations: when, where, the error each failed with (``system_attrs_fail_reason``), and
    with which parameters.

A run with several objectives (:mod:`propulate.objectives`) has the sections of
:data:`MULTI_OBJECTIVE_SECTIONS`: ``front``, ``front-table`` and ``hypervolume`` instead of ``best-loss``
and ``top``, the others as above, each objective named with its direction (``error (min)``) and its values
as the loss function returned them:

``front``
    The completed evaluations in objective space, the Pareto front highlighted (two objectives: joined by
    the staircase that bounds what they dominate; three or more: a scatter matrix of every pair).
``front-table``
    The Pareto front (:func:`propulate.report.fronts.pareto_front_rows`): distinct non-dominated completed
    evaluations with their metrics, where they were bred and their parameters, sorted by the first
    objective, at most :data:`MAX_FRONT_ROWS` of them.
``hypervolume``
    The hypervolume of the front so far against completed evaluations and time, and a table of it after
    each tenth of the completed evaluations (:func:`propulate.report.fronts.hypervolume_history`), with the
    reference point: the one given, or 10 % of each objective's range beyond its worst completed value.
``parallel``
    The objectives are axes too; lines are colored by Pareto rank among the lines shown (0: on the front;
    the front's lines are always shown, up to a fifth of :data:`MAX_LINES`).
``parameters``, ``timeline``, ``interim``
    The first objective stands in for the loss.

Figures with many points are thinned to at most :data:`MAX_POINTS` per figure and the parallel coordinates
to :data:`MAX_LINES` lines (the best evaluations always kept, the rest a seeded random choice, so the file
is the same every time it is built from the same checkpoint) and drawn with WebGL (``Scattergl``), so that
the report of a run of 100,000 evaluations builds and renders in seconds (``benchmarks/report_html.py``
measures both; ``benchmarks/README.md`` has the numbers). plotly is an optional dependency
(``pip install "propulate[report]"``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..objectives import pareto_ranks
from .frame import metric_columns
from .fronts import (
    hypervolume_history,
    minimized,
    non_dominated,
    objective_labels,
    objectives_of,
    pareto_front_rows,
)
from .lineage import best_schedule, has_lineage, intervals
from .prepare import category_codes, front_points, loss_history, running_clock, staircase
from .summary import best, configuration_table, status_counts, time_unit

if TYPE_CHECKING:
    import pandas as pd

    from ..objectives import Objectives

__all__ = [
    "MAX_FRONT_ROWS",
    "MAX_LINES",
    "MAX_POINTS",
    "MULTI_OBJECTIVE_SECTIONS",
    "SECTIONS",
    "build_html",
    "write_html",
]

#: Most points (or lines, or timeline segments) drawn in one figure.
MAX_POINTS = 10_000
#: Most lines in the parallel-coordinates figure. A browser draws every line in full, so this bounds the
#: time the figure takes to draw, which would otherwise dominate the page's.
MAX_LINES = 1_000
#: Most interim-loss curves drawn.
MAX_CURVES = 2_000
#: Most failed evaluations listed.
MAX_FAILURES = 200
#: Most rows of the Pareto front listed.
MAX_FRONT_ROWS = 200
#: Section ids, in the order of the page, with their headings.
SECTIONS = {
    "best-loss": "Best loss so far",
    "top": "Top configurations",
    "parallel": "Parameters of the completed evaluations",
    "parameters": "Loss against each parameter",
    "timeline": "Worker timeline",
    "migration": "Migration between islands",
    "interim": "Interim losses",
    "failures": "Failures",
}
#: The section only a population-based training has, after ``top``.
PBT_SECTIONS = {"pbt": "Population-based training: each member's schedule"}
#: The sections of a run with several objectives.
MULTI_OBJECTIVE_SECTIONS = {
    "front": "Pareto front",
    "front-table": "Configurations on the Pareto front",
    "hypervolume": "Hypervolume of the Pareto front so far",
    "parallel": "Parameters and objectives of the completed evaluations",
    "parameters": "The first objective against each parameter",
    "timeline": "Worker timeline",
    "migration": "Migration between islands",
    "interim": "Interim losses",
    "failures": "Failures",
}
COLORS = {"COMPLETE": "#1f77b4", "PRUNED": "#ff7f0e", "FAIL": "#d62728"}
# A lighter shade of each, for every other evaluation of a worker on the timeline.
LIGHT = {"COMPLETE": "#7fb3da", "PRUNED": "#ffbf86", "FAIL": "#eb9393"}
LABELS = {"COMPLETE": "completed", "PRUNED": "pruned", "FAIL": "failed"}
CONFIG = {"displaylogo": False, "responsive": True}
STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
th { background: #f3f3f3; }
section { margin-bottom: 2em; }
.note { color: #555; font-size: 0.9em; }
"""


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as err:
        raise ImportError(
            'the HTML report needs plotly; install it with: pip install "propulate[report]"'
        ) from err
    return go


def _thin(n: int, keep_first: np.ndarray | None = None, limit: int = MAX_POINTS, seed: int = 0) -> np.ndarray:
    """Return sorted indices of at most ``limit`` of ``n`` items: ``keep_first`` and a random choice."""
    if n <= limit:
        return np.arange(n)
    kept = np.unique(keep_first if keep_first is not None else np.zeros(0, dtype=np.int64))[:limit]
    rest = np.setdiff1d(np.arange(n), kept)
    chosen = np.random.default_rng(seed).choice(rest, size=limit - len(kept), replace=False)
    return np.sort(np.concatenate((kept, chosen)))


def _figure_html(fig: Any, section: str) -> str:
    # A fixed div id: the same checkpoint gives the same file.
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"{section}-plot", config=CONFIG))


def _table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for values in frame.itertuples(index=False, name=None):
        cells = "".join(f"<td>{html.escape(_cell(v))}</td>" for v in values)
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cell(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return "" if np.isnan(value) else f"{value:.6g}"
    return str(value)


def _message(fig: Any, text: str) -> None:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)


def _schedules(frame: pd.DataFrame, go: Any) -> str:
    """Return each numeric hyperparameter against the steps trained, per member, and the best schedule."""
    from plotly.subplots import make_subplots

    rows, best = intervals(frame), best_schedule(frame)
    params = [c for c in frame.columns if c.startswith("params_") and frame[c].dtype.kind in "iuf"]
    names = [c[len("params_") :] for c in params]
    fig = make_subplots(rows=max(len(params), 1), cols=1, shared_xaxes=True, subplot_titles=names or None)
    space = frame.attrs.get("search_space", {})
    from plotly.colors import qualitative

    palette = qualitative.Plotly  # a member has the same color in every subplot
    several = rows["island"].nunique() > 1  # a member is named by its island and its index there
    lines = [
        (
            f"island {key[0]} member {key[1]}" if several else f"member {key[-1]}",
            group,
            {"width": 1.5, "color": palette[i % len(palette)]},
        )
        for i, (key, group) in enumerate(rows.groupby(["island", "user_attrs__member"]))
    ]
    renamed = {
        "start": "user_attrs__start",
        "until": "user_attrs__until",
        **dict(zip(names, params, strict=True)),
    }
    lines.append(
        ("best member's schedule", best.rename(columns=renamed), {"width": 5, "color": "rgba(0,0,0,0.3)"})
    )
    for k, column in enumerate(params):
        for label, group, line in lines:
            # Each interval a flat segment from its first step to its last: the value it was trained with.
            steps = np.column_stack([group["user_attrs__start"], group["user_attrs__until"]]).ravel()
            values = np.repeat(group[column].to_numpy(dtype=np.float64), 2)
            trace = go.Scatter(x=steps, y=values, mode="lines", name=label, legendgroup=label, line=line)
            fig.add_trace(trace.update(showlegend=k == 0), row=k + 1, col=1)
        domain = space.get(names[k])
        if isinstance(domain, dict) and domain.get("log"):
            fig.update_yaxes(type="log", row=k + 1, col=1)
    fig.update_xaxes(title_text="steps trained", row=max(len(params), 1), col=1)
    fig.update_layout(height=260 * max(len(params), 1))
    return _figure_html(fig, "pbt") + _table(best)


def _best_loss(frame: pd.DataFrame, go: Any) -> str:
    from plotly.subplots import make_subplots

    history = loss_history(frame)
    done, states, losses, best_so_far = history.rows, history.states, history.losses, history.best
    scale, unit = time_unit(float(history.end.max()) if len(done) else 0.0)
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, subplot_titles=("against evaluations", "against time")
    )
    if not np.isfinite(losses).any():
        _message(fig, "no loss to show: no evaluation completed")
        return _figure_html(fig, "best-loss")
    # The points where the best loss improves, and the last one: the step line, exactly.
    improved = np.flatnonzero(np.r_[True, best_so_far[1:] < best_so_far[:-1]] & np.isfinite(best_so_far))
    steps = np.unique(np.r_[improved, len(done) - 1])
    shown = _thin(len(done), keep_first=improved)
    for col, x in ((1, np.arange(1, len(done) + 1)), (2, history.end / scale)):
        for state in ("COMPLETE", "PRUNED"):
            mask = shown[states[shown] == state]
            fig.add_trace(
                go.Scattergl(
                    x=x[mask],
                    y=losses[mask],
                    mode="markers",
                    marker={"color": COLORS[state], "size": 4, "opacity": 0.5},
                    name=LABELS[state],
                    legendgroup=state,
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
        fig.add_trace(
            go.Scatter(
                x=x[steps],
                y=np.where(np.isfinite(best_so_far[steps]), best_so_far[steps], np.nan),
                mode="lines",
                line={"shape": "hv", "color": "black", "width": 2},
                name="best loss so far",
                legendgroup="best",
                showlegend=col == 1,
            ),
            row=1,
            col=col,
        )
    fig.update_xaxes(title_text="finished evaluations (in order of completion)", row=1, col=1)
    fig.update_xaxes(title_text=f"wall-clock time while running [{unit}]", row=1, col=2)
    fig.update_yaxes(title_text="loss (lower is better)", row=1, col=1)
    finite = losses[np.isfinite(losses)]
    if finite.min() > 0 and finite.max() > 10 * finite.min():
        fig.update_yaxes(type="log")
    fig.update_layout(height=450)
    return _figure_html(fig, "best-loss")


def _axis_values(
    frame: pd.DataFrame, column: str, space: dict[str, Any]
) -> tuple[np.ndarray, dict[str, Any]]:
    """Return a parameter's values as numbers, and how to label them (categories, log scale)."""
    values = frame[column]
    domain = space.get(column[len("params_") :])
    if values.dtype.name == "category" or values.dtype == object:
        codes, choices = category_codes(values, domain)  # in the declared order, as the static plots
        return codes, {"categories": [str(c) for c in choices]}
    return values.to_numpy(dtype=np.float64), {"log": isinstance(domain, dict) and bool(domain.get("log"))}


def _parallel(frame: pd.DataFrame, go: Any, goals: Objectives | None = None) -> str:
    complete = frame.index[frame["state"] == "COMPLETE"].to_numpy()
    fig = go.Figure()
    params = [c for c in frame.columns if c.startswith("params_")]
    if not len(complete) or not params:
        _message(fig, "no completed evaluation")
        return _figure_html(fig, "parallel")
    if goals is None:
        losses = frame["value"].to_numpy(dtype=np.float64)[complete]
    else:  # the front first: 0 on it, 1 off it
        losses = (~non_dominated(minimized(frame.iloc[complete], goals))).astype(np.float64)
    best = np.argsort(losses, kind="stable")[: MAX_LINES // 5]
    rows = complete[_thin(len(complete), keep_first=best, limit=MAX_LINES)]
    space = frame.attrs.get("search_space", {})
    dimensions = []
    for column in params:
        values, how = _axis_values(frame, column, space)
        values = values[rows]
        label = column[len("params_") :]
        if "categories" in how:
            ticks = {"tickvals": list(range(len(how["categories"]))), "ticktext": how["categories"]}
            dimensions.append({"label": label, "values": values, **ticks})
        elif how["log"]:
            exponents = np.arange(np.floor(np.log10(values.min())), np.ceil(np.log10(values.max())) + 1)
            ticks = {"tickvals": exponents.tolist(), "ticktext": [f"{10**e:g}" for e in exponents]}
            dimensions.append({"label": f"{label} (log)", "values": np.log10(values), **ticks})
        else:
            dimensions.append({"label": label, "values": values})
    if goals is None:
        shown = frame["value"].to_numpy(dtype=np.float64)[rows]
        dimensions.append({"label": "loss", "values": shown})
        color = "loss"
    else:
        for label, i in zip(objective_labels(goals), range(len(goals)), strict=True):
            dimensions.append(
                {"label": label, "values": frame[f"values_{i}"].to_numpy(dtype=np.float64)[rows]}
            )
        # Ranked among the lines shown, which hold the front (unless it has more than MAX_LINES // 5 rows).
        shown = pareto_ranks(minimized(frame.iloc[rows], goals)).astype(np.float64)
        color = "Pareto rank"
    # Colors up to the 90th percentile: a few very bad runs would wash out the rest.
    line = {"color": shown, "colorscale": "Viridis_r", "cmin": float(shown.min())}
    line |= {
        "cmax": max(float(np.percentile(shown, 90)), float(shown.min()) + (goals is not None)),
        "showscale": True,
        "colorbar": {"title": {"text": color}},
    }
    fig.add_trace(go.Parcoords(line=line, dimensions=dimensions))
    fig.update_layout(height=450)
    return _figure_html(fig, "parallel")


def _parameters(frame: pd.DataFrame, go: Any, loss: tuple[np.ndarray, np.ndarray, str] | None = None) -> str:
    """Return the loss against each parameter; ``loss``: the values shown, minimized, and their name."""
    from plotly.subplots import make_subplots

    params = [c for c in frame.columns if c.startswith("params_")]
    ncols = min(3, max(len(params), 1))
    nrows = max(-(-len(params) // ncols), 1)
    names = [c[len("params_") :] for c in params]
    fig = make_subplots(rows=nrows, cols=ncols, shared_yaxes=True, subplot_titles=names or None)
    states = frame["state"].to_numpy()
    if loss is None:
        value = frame["value"].to_numpy(dtype=np.float64)
        loss = (value, value, "loss")
    losses, key, name = loss
    finished = np.flatnonzero(np.isin(states, ("COMPLETE", "PRUNED")))
    if not len(finished) or not params:
        _message(fig, "no loss to show")
        return _figure_html(fig, "parameters")
    rows = finished[_thin(len(finished), keep_first=np.argsort(key[finished])[: MAX_POINTS // 10])]
    jitter = np.random.default_rng(0).uniform(-0.2, 0.2, size=len(rows))
    space = frame.attrs.get("search_space", {})
    for k, column in enumerate(params):
        row, col = k // ncols + 1, k % ncols + 1
        values, how = _axis_values(frame, column, space)
        x = values[rows]
        if "categories" in how or frame[column].dtype.kind in "iu":
            x = x + jitter  # equal values side by side rather than on top of each other
        for state in ("COMPLETE", "PRUNED"):
            mask = states[rows] == state
            fig.add_trace(
                go.Scattergl(
                    x=x[mask],
                    y=losses[rows][mask],
                    mode="markers",
                    marker={"color": COLORS[state], "size": 4, "opacity": 0.5},
                    name=LABELS[state],
                    legendgroup=state,
                    showlegend=k == 0,
                ),
                row=row,
                col=col,
            )
        if "categories" in how:
            fig.update_xaxes(
                tickvals=list(range(len(how["categories"]))), ticktext=how["categories"], row=row, col=col
            )
        elif how["log"]:
            fig.update_xaxes(type="log", row=row, col=col)
    fig.update_yaxes(title_text=name, col=1)
    finite = losses[np.isfinite(losses)]
    if finite.min() > 0 and finite.max() > 10 * finite.min():
        fig.update_yaxes(type="log")
    fig.update_layout(height=320 * nrows)
    return _figure_html(fig, "parameters")


def _timeline(frame: pd.DataFrame, go: Any, loss: tuple[np.ndarray, str] | None = None) -> str:
    """Each worker's evaluations; ``loss``: the values to show on hovering, and their name."""
    start, end, _ = running_clock(frame)
    fig = go.Figure()
    done = np.flatnonzero(~np.isnan(end))
    if not len(done):
        _message(fig, "no finished evaluation")
        return _figure_html(fig, "timeline")
    # The latest evaluations when there are too many to draw.
    done = done[np.argsort(end[done], kind="stable")][-MAX_POINTS:]
    workers = frame[["island", "worker"]].to_numpy()
    keys = sorted({(int(i), int(w)) for i, w in workers[done]})
    row_of = {key: r for r, key in enumerate(keys)}
    rows = np.array([row_of[(int(i), int(w))] for i, w in workers[done]])
    # Every other evaluation of a worker (by start) in a lighter shade.
    by_start = np.lexsort((start[done], rows))
    parity = np.empty(len(done), dtype=np.int64)
    parity[by_start] = np.arange(len(done)) % 2
    scale, unit = time_unit(float(end[done].max()))
    states = frame["state"].to_numpy()[done]
    numbers = frame["number"].to_numpy()[done]
    values, name = loss or (frame["value"].to_numpy(dtype=np.float64), "loss")
    losses = values[done]
    for state in ("COMPLETE", "PRUNED", "FAIL"):
        for shade, colors in ((0, COLORS), (1, LIGHT)):
            chosen = np.flatnonzero((states == state) & (parity == shade))
            if not len(chosen):
                continue
            # One segment per evaluation, separated by gaps (NaN).
            x = np.column_stack(
                (start[done][chosen] / scale, end[done][chosen] / scale, np.full(len(chosen), np.nan))
            )
            y = np.repeat(rows[chosen], 3).astype(np.float64)
            custom = np.repeat(np.column_stack((numbers[chosen], losses[chosen])), 3, axis=0)
            fig.add_trace(
                go.Scattergl(
                    x=x.ravel(),
                    y=y,
                    customdata=custom,
                    mode="lines",
                    line={"color": colors[state], "width": 12},
                    name=LABELS[state],
                    legendgroup=state,
                    showlegend=shade == 0 or not (parity[states == state] == 0).any(),
                    hovertemplate=f"evaluation %{{customdata[0]}}: {LABELS[state]}, "
                    f"{name} %{{customdata[1]:.6g}}"
                    "<extra></extra>",
                )
            )
    labels = [f"island {i}, worker {w}" for i, w in keys]
    fig.update_yaxes(tickvals=list(range(len(keys))), ticktext=labels, autorange="reversed")
    fig.update_xaxes(title_text=f"wall-clock time while running [{unit}]")
    fig.update_layout(height=min(max(200 + 30 * len(keys), 300), 1500))
    return _figure_html(fig, "timeline")


def migration_counts(frame: pd.DataFrame) -> np.ndarray:
    """Return how many moves went from island ``i`` to island ``j``, shape ``(n_islands, n_islands)``."""
    islands = int(frame["island"].max()) + 1 if len(frame) else 1
    counts = np.zeros((islands, islands), dtype=np.int64)
    travelled = frame["migration_history"].astype(str)
    for history, times in travelled[travelled.str.contains("-")].value_counts().items():
        for path in str(history).split():
            hops = [int(h) for h in path.split("-")]
            for a, b in pairwise(hops):
                size = max(a, b) + 1
                if size > len(counts):
                    counts = np.pad(counts, (0, size - len(counts)))
                counts[a, b] += times
    return counts


def _migration(frame: pd.DataFrame, go: Any) -> tuple[str, str]:
    counts = migration_counts(frame)
    names = [f"island {i}" for i in range(len(counts))]
    fig = go.Figure(
        go.Heatmap(
            z=counts,
            x=[f"to {n}" for n in names],
            y=[f"from {n}" for n in names],
            colorscale="Blues",
            texttemplate="%{z}",
            hovertemplate="%{y} %{x}: %{z} individual(s)<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=min(250 + 40 * len(counts), 900))
    note = (
        f"{int(counts.sum())} move(s) between {len(counts)} island(s), counted from the evaluations' travels"
    )
    if len(counts) == 1:
        note = "one island: nothing to migrate"
    return note, _figure_html(fig, "migration")


def _interim(
    frame: pd.DataFrame, interim: pd.DataFrame | None, go: Any, key: np.ndarray | None = None
) -> tuple[str, str]:
    """Return the interim losses; the best runs by ``key`` (default: the value) are always shown."""
    fig = go.Figure()
    curves = None
    if interim is not None and len(interim):
        ranked = frame[["uid", "number", "state"]].assign(value=frame["value"] if key is None else key)
        curves = interim.merge(ranked, on="uid").sort_values(["number", "step"])
    if curves is None or not len(curves):
        _message(fig, "no interim losses in this checkpoint")
        note = (
            "The checkpoint holds interim losses only for generator loss functions run with a surrogate that "
            "records learning curves (StaticSurrogate, LogLinearSurrogate, DynamicSurrogate)."
        )
        return note, _figure_html(fig, "interim")
    runs = curves.drop_duplicates("number")
    order = np.argsort(runs["value"].to_numpy(dtype=np.float64), kind="stable")
    kept = runs["number"].to_numpy()[_thin(len(runs), keep_first=order[: MAX_CURVES // 4], limit=MAX_CURVES)]
    curves = curves[curves["number"].isin(kept)]
    for state in ("COMPLETE", "PRUNED", "FAIL"):
        part = curves[curves["state"] == state]
        if not len(part):
            continue
        # One line per evaluation, separated by gaps (NaN) where the evaluation changes.
        last = np.r_[part["number"].to_numpy()[1:] != part["number"].to_numpy()[:-1], True]
        x = np.column_stack((part["step"].to_numpy(dtype=np.float64), np.full(len(part), np.nan)))
        y = np.column_stack((part["loss"].to_numpy(), np.full(len(part), np.nan)))
        keep = np.column_stack((np.ones(len(part), dtype=bool), last)).ravel()
        fig.add_trace(
            go.Scattergl(
                x=x.ravel()[keep],
                y=y.ravel()[keep],
                mode="lines",
                line={"color": COLORS[state], "width": 1},
                opacity=0.4,
                name=f"{LABELS[state]} runs",
            )
        )
        if state == "PRUNED":
            stops = part[last]
            fig.add_trace(
                go.Scattergl(
                    x=stops["step"],
                    y=stops["loss"],
                    mode="markers",
                    marker={"symbol": "x", "color": COLORS[state], "size": 6},
                    name="pruned here",
                )
            )
    fig.update_xaxes(title_text="step (0 is the first interim loss)")
    fig.update_yaxes(title_text="interim loss")
    fig.update_layout(height=450)
    shown = curves["number"].nunique()
    note = f"{shown:,} of {len(runs):,} learning curves shown (the best ones and a random choice)"
    return note if shown < len(runs) else f"{shown:,} learning curves", _figure_html(fig, "interim")


def _failures(frame: pd.DataFrame) -> str:
    failed = frame[frame["state"] == "FAIL"]
    if not len(failed):
        return "<p>No evaluation failed.</p>"
    params = [c for c in frame.columns if c.startswith("params_")]
    # The error each failed with (a checkpoint written before errors were stored has none).
    reason = ["system_attrs_fail_reason"] if "system_attrs_fail_reason" in frame.columns else []
    shown = failed[["number", "datetime_complete", "island", "worker", "generation", *reason, *params]].head(
        MAX_FAILURES
    )
    shown = shown.assign(datetime_complete=shown["datetime_complete"].dt.strftime("%Y-%m-%d %H:%M:%S"))
    shown = shown.set_axis(
        [
            "number",
            "failed at (UTC)",
            "island",
            "worker",
            "generation",
            *(["error"] if reason else []),
            *(c[len("params_") :] for c in params),
        ],
        axis=1,
    )
    more = f" (the first {MAX_FAILURES} listed)" if len(failed) > MAX_FAILURES else ""
    where = (
        "Each failed with the error shown; its traceback is in the log of the rank that ran it and in "
        "<code>Individual.error</code> of the checkpoint's individuals."
        if reason
        else "This checkpoint stores no error messages (written before they were stored): each failure is "
        "logged with its traceback by the rank that ran it."
    )
    return f"<p>{len(failed):,} failed evaluation(s){more}. {where}</p>" + _table(shown)


def _front(frame: pd.DataFrame, goals: Objectives, go: Any) -> str:
    labels = objective_labels(goals)
    numbers, values, front = front_points(frame, goals)
    fig = go.Figure()
    if not len(values):
        _message(fig, "no completed evaluation")
        return _figure_html(fig, "front")
    shown = _thin(len(values), keep_first=front)
    others = np.setdiff1d(shown, front)
    front = front[np.isin(front, shown)]  # all of it, unless it has more than MAX_POINTS points
    hover = "evaluation %{customdata}<extra></extra>"
    if len(goals) == 1:
        for rows, name, marker in (
            (others, "completed", {"color": COLORS["COMPLETE"], "size": 4, "opacity": 0.5}),
            (front, "Pareto front", {"color": "gold", "size": 9, "line": {"color": "black", "width": 1}}),
        ):
            fig.add_trace(
                go.Scattergl(
                    x=numbers[rows],
                    y=values[rows, 0],
                    customdata=numbers[rows],
                    mode="markers",
                    marker=marker,
                    name=name,
                    hovertemplate=hover,
                )
            )
        fig.update_xaxes(title_text="evaluation (number: in order of start)")
        fig.update_yaxes(title_text=labels[0])
    elif len(goals) == 2:
        fig.add_trace(
            go.Scattergl(
                x=values[others, 0],
                y=values[others, 1],
                customdata=numbers[others],
                mode="markers",
                marker={"color": COLORS["COMPLETE"], "size": 4, "opacity": 0.5},
                name="completed",
                hovertemplate=hover,
            )
        )
        line = staircase(values[front])
        fig.add_trace(
            go.Scatter(
                x=line[:, 0],
                y=line[:, 1],
                mode="lines",
                line={"color": "black", "width": 1.5},
                name="bound of what the front dominates",
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=values[front, 0],
                y=values[front, 1],
                customdata=numbers[front],
                mode="markers",
                marker={"color": "gold", "size": 9, "line": {"color": "black", "width": 1}},
                name="Pareto front",
                hovertemplate=hover,
            )
        )
        fig.update_xaxes(title_text=labels[0])
        fig.update_yaxes(title_text=labels[1])
    else:
        for rows, name, marker in (
            (others, "completed", {"color": COLORS["COMPLETE"], "size": 3, "opacity": 0.5}),
            (front, "Pareto front", {"color": "gold", "size": 7, "line": {"color": "black", "width": 1}}),
        ):
            dimensions = [{"label": label, "values": values[rows, i]} for i, label in enumerate(labels)]
            fig.add_trace(
                go.Splom(
                    dimensions=dimensions,
                    customdata=numbers[rows],
                    marker=marker,
                    name=name,
                    diagonal={"visible": False},
                    showupperhalf=False,
                    hovertemplate=hover,
                )
            )
    fig.update_layout(height=max(450, 220 * len(goals)) if len(goals) > 2 else 500)
    return _figure_html(fig, "front")


def _front_table(frame: pd.DataFrame, goals: Objectives) -> str:
    front = pareto_front_rows(frame, goals)
    complete = int((frame["state"] == "COMPLETE").sum())
    if not len(front):
        return "<p>No evaluation completed.</p>"
    shown = front.head(MAX_FRONT_ROWS)
    metrics = [c for c in metric_columns(frame) if shown[c].notna().any()]
    table = configuration_table(frame, shown, metrics, goals)
    more = f"; the first {MAX_FRONT_ROWS} listed" if len(front) > MAX_FRONT_ROWS else ""
    note = (
        f"{len(front):,} distinct configuration(s) of {complete:,} completed evaluations that no other "
        f"completed evaluation dominates, sorted by {objective_labels(goals)[0]}, best first{more}."
    )
    return f'<p class="note">{html.escape(note)}</p>' + _table(table)


def _hypervolume(
    frame: pd.DataFrame, goals: Objectives, reference: Sequence[float] | None, go: Any
) -> tuple[str, pd.DataFrame]:
    """Return the hypervolume section's body and the history it tabulates (at 10 points of the run)."""
    from plotly.subplots import make_subplots

    labels = objective_labels(goals)
    complete = int((frame["state"] == "COMPLETE").sum())
    table = hypervolume_history(frame, goals, reference)
    curve = hypervolume_history(
        frame, goals, reference, points=None if complete <= MAX_POINTS else MAX_POINTS
    )
    ref = goals.values(table.attrs["reference"])
    where = ", ".join(f"{label} {value:.6g}" for label, value in zip(labels, ref, strict=True))
    rule = (
        "given"
        if reference is not None
        else "by default 10 % of each objective's range beyond its worst completed value"
    )
    note = (
        f"The hypervolume of the front of the completed evaluations so far, in the order they completed, "
        f"up to the reference point {where} ({rule}); higher is better."
    )
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, subplot_titles=("against evaluations", "against time")
    )
    if not len(curve):
        _message(fig, "no completed evaluation")
        return f'<p class="note">{html.escape(note)}</p>' + _figure_html(fig, "hypervolume"), table
    _, end, _ = running_clock(frame)
    scale, unit = time_unit(float(np.nanmax(end)))
    at = end[frame.index.get_indexer(curve["number"])] / scale
    for col, x in ((1, curve["completed"].to_numpy()), (2, at)):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=curve["hypervolume"].to_numpy(),
                mode="lines",
                line={"shape": "hv", "color": "black"},
                name="hypervolume of the front so far",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    fig.update_xaxes(title_text="completed evaluations (in order of completion)", row=1, col=1)
    fig.update_xaxes(title_text=f"wall-clock time while running [{unit}]", row=1, col=2)
    fig.update_yaxes(title_text="hypervolume", row=1, col=1)
    fig.update_layout(height=450)
    shown = table.assign(datetime_complete=table["datetime_complete"].dt.strftime("%Y-%m-%d %H:%M:%S"))
    shown = shown[["completed", "datetime_complete", "front_size", "hypervolume"]]
    shown.columns = ["completed", "at (UTC)", "front size", "hypervolume"]
    body = f'<p class="note">{html.escape(note)}</p>' + _figure_html(fig, "hypervolume") + _table(shown)
    return body, table


def build_html(
    frame: pd.DataFrame,
    interim: pd.DataFrame | None = None,
    title: str = "propulate report",
    notes: Sequence[str] = (),
    top: int = 10,
    objectives: Any = None,
    reference: Sequence[float] | None = None,
) -> str:
    """Return the report as one self-contained HTML document.

    For a run with several objectives, the sections of :data:`MULTI_OBJECTIVE_SECTIONS` (see the module
    docstring): the Pareto front as a figure and a table, and the hypervolume of the front so far.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned.
    interim : pandas.DataFrame, optional
        What :func:`propulate.report.frame.interim_losses` returned for the same individuals.
    title : str
        The page's title and first heading.
    notes : sequence of str
        Lines to show under the title (e.g. the run's configuration).
    top : int >= 1
        How many of the best distinct configurations to list (with several objectives, unused: the front
        table lists up to :data:`MAX_FRONT_ROWS` rows).
    objectives : optional
        The run's objectives, for their names and directions (see
        :func:`propulate.report.fronts.objectives_of`).
    reference : sequence of float, optional
        The hypervolume's reference point, one number per objective in its own direction (default: 10 % of
        each objective's range beyond its worst completed value,
        :func:`propulate.report.fronts.reference_point`).

    Returns
    -------
    str
        The HTML text; the same for the same arguments.

    Raises
    ------
    ImportError
        If plotly or pandas is not installed.
    ValueError
        If ``top`` is not a positive integer, or ``reference`` is not one finite number per objective.
    """
    go = _plotly()
    from plotly.offline import get_plotlyjs

    goals = objectives_of(frame, objectives)
    counts = status_counts(frame)
    summary = ", ".join(f"{int(n):,} {state}" for state, n in counts.items() if n)
    migration_note, migration = _migration(frame, go)
    data: dict[str, Any] = {"evaluations": len(frame), "states": {k: int(v) for k, v in counts.items()}}
    if goals is None:
        top_table = configuration_table(frame, best(frame, top), metric_columns(frame))
        interim_note, interim_plot = _interim(frame, interim, go)
        headings = SECTIONS | PBT_SECTIONS
        bodies = {
            "best-loss": _best_loss(frame, go),
            "top": _table(top_table) if len(top_table) else "<p>No evaluation completed.</p>",
            **({"pbt": _schedules(frame, go)} if has_lineage(frame) else {}),
            "parallel": _parallel(frame, go),
            "parameters": _parameters(frame, go),
            "timeline": _timeline(frame, go),
        }
    else:
        first = frame["values_0"].to_numpy(dtype=np.float64)
        key = first * goals.signs[0]
        label = objective_labels(goals)[0]
        interim_note, interim_plot = _interim(frame, interim, go, key)
        hypervolume, history = _hypervolume(frame, goals, reference, go)
        headings = MULTI_OBJECTIVE_SECTIONS
        bodies = {
            "front": _front(frame, goals, go),
            "front-table": _front_table(frame, goals),
            "hypervolume": hypervolume,
            "parallel": _parallel(frame, go, goals),
            "parameters": _parameters(frame, go, (first, key, label)),
            "timeline": _timeline(frame, go, (first, label)),
        }
        data |= {
            "objectives": objective_labels(goals),
            "front": int(history["front_size"].iloc[-1]) if len(history) else 0,
            "hypervolume": float(history["hypervolume"].iloc[-1]) if len(history) else 0.0,
            "reference": list(goals.values(history.attrs["reference"])),
        }
    bodies |= {
        "migration": f'<p class="note">{html.escape(migration_note)}</p>{migration}',
        "interim": f'<p class="note">{html.escape(interim_note)}</p>{interim_plot}',
        "failures": _failures(frame),
    }
    sections = "\n".join(
        f'<section id="{key}"><h2>{html.escape(headings[key])}</h2>\n{body}\n</section>'
        for key, body in bodies.items()
    )
    lines = "".join(f"<p class='note'>{html.escape(line)}</p>" for line in notes)
    # "</script" inside the library would end its script element early.
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n"
        f"<script type='text/javascript'>{plotly_js}</script>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{lines}<p>{len(frame):,} evaluations: {html.escape(summary)}</p>\n"
        f"{sections}\n<script type='application/json' id='report-data'>"
        f"{json.dumps(data)}"
        "</script>\n</body>\n</html>\n"
    )


def write_html(
    frame: pd.DataFrame, path: str | Path, interim: pd.DataFrame | None = None, **kwargs: Any
) -> Path:
    """Write :func:`build_html` to ``path`` (UTF-8) and return it; ``kwargs`` go to :func:`build_html`."""
    path = Path(path)
    path.write_text(build_html(frame, interim, **kwargs), encoding="utf-8")
    return path
