"""Figures of a run as PNG files, drawn from the frame of :func:`propulate.report.frame.to_dataframe`.

- :func:`plot_best_loss`: the best loss so far against the number of finished evaluations and against
  wall-clock time;
- :func:`plot_timeline`: one row per worker, a bar per evaluation colored by its state, over the time the
  worker was available (idle time shows as the gaps);
- :func:`plot_parameters`: the loss against each parameter.

For a run with several objectives (:mod:`propulate.objectives`), :func:`save_figures` writes
:data:`MULTI_OBJECTIVE_FIGURES` instead: :func:`plot_front` (the completed evaluations in objective space,
the Pareto front highlighted) and :func:`plot_hypervolume` (the hypervolume of the front so far) take the
place of :func:`plot_best_loss`, which has no single loss to show; :func:`plot_timeline` is the same, and
:func:`plot_parameters` shows the first objective, named as such, with the front's evaluations marked.

Time axes show wall-clock time *while running* (:func:`propulate.report.prepare.running_clock`): the
sessions of a resumed run are put end to end (the time the job was not running between them is left out)
and dotted lines mark where a session began.

matplotlib is an optional dependency (``pip install "propulate[plot]"``), imported on first use. Figures are
:class:`matplotlib.figure.Figure` objects drawn on the Agg canvas, without pyplot, so nothing here opens a
window or changes matplotlib's global state; :func:`save_figures` writes them as PNG files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .fronts import hypervolume_history, objective_labels, objectives_of, pareto_front_rows
from .prepare import category_codes, front_points, loss_history, running_clock, staircase
from .summary import session_spans, time_unit, utilization

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..objectives import Objectives

__all__ = [
    "FIGURES",
    "MULTI_OBJECTIVE_FIGURES",
    "plot_best_loss",
    "plot_front",
    "plot_hypervolume",
    "plot_parameters",
    "plot_timeline",
    "save_figures",
]

# One color per finished state, from matplotlib's default cycle.
COLORS = {"COMPLETE": "tab:blue", "PRUNED": "tab:orange", "FAIL": "tab:red"}
LABELS = {
    "COMPLETE": "completed",
    "PRUNED": "pruned (last interim loss)",
    "FAIL": "failed (no loss)",
}
IDLE = "#e6e6e6"


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            'plotting needs matplotlib; install it with: pip install "propulate[plot]"'
        ) from err
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _dots(n: int) -> dict[str, float]:
    """Marker size (points squared) and opacity for a scatter of ``n`` points: smaller, fainter for many."""
    return {"s": 12.0, "alpha": 0.5} if n <= 2000 else {"s": 3.0, "alpha": 0.25}


def _mark_sessions(ax: Axes, offsets: np.ndarray, scale: float) -> None:
    for i, x in enumerate(offsets[1:], start=1):
        ax.axvline(x / scale, color="0.4", linestyle=":", linewidth=1.0, label="resumed" if i == 1 else None)


def _loss_scale(ax: Axes, losses: np.ndarray) -> None:
    """Log scale for the loss when every loss is positive and they span more than a factor of ten."""
    from matplotlib.ticker import FuncFormatter

    finite = losses[np.isfinite(losses)]
    if len(finite) and finite.min() > 0 and finite.max() > 10 * finite.min():
        ax.set_yscale("log")
        # Plain numbers ("0.2", "6") read more easily than 2 x 10^-1; few decades leave room for 2 and 5.
        few = finite.max() < 1000 * finite.min()
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: _minor_label(value) if few else ""))


def _minor_label(value: float) -> str:
    """Label the minor ticks 2 and 5 of each decade of a log axis."""
    mantissa = round(value / 10 ** math.floor(math.log10(value)))
    return f"{value:g}" if mantissa in (2, 5) else ""


def _nothing_to_draw(ax: Axes, why: str) -> None:
    """Say in the middle of empty axes why they are empty, without ticks that would mean nothing."""
    ax.set_xticks([])
    ax.text(0.5, 0.5, f"{why}: no loss to show", transform=ax.transAxes, ha="center", va="center")


def plot_best_loss(frame: pd.DataFrame) -> Figure:
    """Return the figure of the best loss so far, against finished evaluations and against time.

    Every finished evaluation's loss is a dot (pruned ones in another color); the step line is the lowest
    loss of a completed evaluation so far. The loss axis is logarithmic when all losses are positive and
    span more than a factor of ten.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    ValueError
        If the frame is of a run with several objectives (:func:`plot_front` and :func:`plot_hypervolume`
        show its progress).
    """
    if objectives_of(frame) is not None:
        raise ValueError(
            "frame: a run with several objectives has no single loss; plot_front and plot_hypervolume show "
            "its progress"
        )
    fig = _figure(11.0, 4.5)
    by_count, by_time = fig.subplots(1, 2, sharey=True)
    history = loss_history(frame)
    done, states, losses = history.rows, history.states, history.losses
    count = np.arange(1, len(done) + 1)
    complete = states == "COMPLETE"
    best = np.where(np.isfinite(history.best), history.best, np.nan)
    scale, unit = time_unit(float(history.end.max()) if len(done) else 0.0)
    for ax, x in ((by_count, count), (by_time, history.end / scale)):
        for state in ("COMPLETE", "PRUNED"):
            mask = states == state
            if mask.any():
                ax.scatter(
                    x[mask], losses[mask], color=COLORS[state], label=LABELS[state], **_dots(len(done))
                )
        ax.step(x, best, where="post", color="black", linewidth=1.8, label="best loss so far")
        ax.grid(True, alpha=0.3)
    _loss_scale(by_count, losses[complete])
    by_count.set_xlabel("finished evaluations (in order of completion)")
    by_count.set_ylabel("loss (lower is better)")
    by_count.set_title("Best loss vs. evaluations")
    _mark_sessions(by_time, history.sessions, scale)
    by_time.set_xlabel(f"wall-clock time while running [{unit}]")
    by_time.set_title("Best loss vs. time")
    failed = int((frame["state"] == "FAIL").sum())
    for ax in (by_count, by_time):
        if np.isfinite(losses).any():
            ax.legend(loc="upper right", fontsize="small")
        else:
            _nothing_to_draw(ax, "no finished evaluations" if not len(done) else f"all {failed:,} failed")
    if not np.isfinite(losses).any():
        by_count.set_yticks([])
    final = f"best loss {np.nanmin(best):.6g}" if np.isfinite(best).any() else "no completed evaluation"
    fig.suptitle(f"Search progress: {len(done):,} finished evaluations ({failed:,} failed), {final}")
    return fig


def _separator(periods: np.ndarray, span: float) -> dict[str, Any]:
    """Edge style of the timeline's bars: a white line between back-to-back evaluations.

    The line is at most 0.8 points wide and at most a quarter of a typical bar, so that it never hides the
    bars; where bars are too narrow to tell apart (thousands per row), none.
    """
    # The axes are about 700 points wide.
    typical = float(np.median(periods)) / span * 700.0 if len(periods) and span > 0 else 0.0
    width = min(0.8, typical / 4.0)
    return {"edgecolor": "white", "linewidth": width} if width >= 0.1 else {"edgecolor": "none"}


def plot_timeline(frame: pd.DataFrame) -> Figure:
    """Return the figure of each worker's evaluations over time.

    One row per worker ``(island, worker)``: a gray band over the sessions it evaluated in, and on it one
    bar per evaluation, colored by state and set apart from the next one by a thin white line (unless the
    bars are too narrow to tell apart); the gray left showing is time the worker spent idle (breeding,
    communicating, checkpointing, waiting). The title gives the overall utilization.

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    start, end, offsets = running_clock(frame)
    done = ~np.isnan(end)
    workers = frame.loc[done, ["island", "worker"]].drop_duplicates().sort_values(["island", "worker"])
    keys = list(workers.itertuples(index=False, name=None))
    fig = _figure(11.0, min(max(2.2 + 0.35 * len(keys), 3.2), 40.0))
    ax = fig.subplots()
    row_of = {key: row for row, key in enumerate(keys)}
    rows = np.array([row_of.get(key, -1) for key in zip(frame["island"], frame["worker"], strict=True)])
    spans = session_spans(frame)
    scale, unit = time_unit(float(np.nanmax(end)) if done.any() else 0.0)
    sessions = frame.loc[done, ["island", "worker", "session"]].drop_duplicates()
    position = {session: i for i, session in enumerate(spans.index)}
    for island, worker, session in sessions.itertuples(index=False, name=None):
        i = position[session]
        ax.broken_barh(
            [(offsets[i] / scale, spans["span_s"].iloc[i] / scale)],
            (row_of[(island, worker)] - 0.4, 0.8),
            facecolors=IDLE,
        )
    states = frame["state"].to_numpy()
    separator = _separator(end[done] - start[done], float(np.nanmax(end)) if done.any() else 0.0)
    for state, color in COLORS.items():
        chosen = np.flatnonzero(done & (states == state))
        if len(chosen) == 0:
            continue
        chosen = chosen[np.argsort(rows[chosen], kind="stable")]
        bars = np.column_stack((start[chosen] / scale, (end[chosen] - start[chosen]) / scale))
        # One collection per worker row: split where the row changes.
        cuts = np.flatnonzero(np.diff(rows[chosen])) + 1
        for row_bars, row in zip(np.split(bars, cuts), rows[chosen][np.r_[0, cuts]], strict=True):
            ax.broken_barh(row_bars.tolist(), (row - 0.35, 0.7), facecolors=color, **separator)
    handles: list[Artist] = [Patch(color=IDLE, label="idle (breeding, communication, waiting)")]
    handles += [Patch(color=COLORS[s], label=LABELS[s]) for s in LABELS if (states[done] == s).any()]
    if len(offsets) > 1:
        handles.append(Line2D([], [], color="0.4", linestyle=":", label="resumed"))
    _mark_sessions(ax, offsets, scale)
    # At most about 40 labelled rows: every worker's, or every k-th one's.
    labelled = range(0, len(keys), max(1, math.ceil(len(keys) / 40)))
    ax.set_yticks(labelled, [f"island {keys[k][0]}, worker {keys[k][1]}" for k in labelled])
    ax.set_ylim(max(len(keys), 1) - 0.5, -0.5)
    if not keys:
        ax.text(0.5, 0.5, "no finished evaluations", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel(f"wall-clock time while running [{unit}]")
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    _, overall = utilization(frame)
    title = f"Worker timeline: {len(keys)} worker(s), {int(done.sum()):,} evaluations"
    if math.isfinite(overall):
        title += f"; {100 * overall:.1f} % of the workers' time spent evaluating"
    ax.set_title(title)
    return fig


def plot_parameters(frame: pd.DataFrame, seed: int = 0, objectives: Any = None) -> Figure:
    """Return the figure of the loss against each parameter, one panel per parameter.

    Numeric parameters on a logarithmic axis when the search space declares them on a log scale
    (:class:`propulate.Float` or :class:`propulate.Integer` with ``log=True``, read from the frame's
    ``attrs["search_space"]``) or, given as a 1.2.2 tuple, when positive and spanning more than two
    decades, else on a linear one; categorical parameters as categories in the order of their choices,
    the points spread sideways so that they do not hide each other, as are integer parameters (by up to a
    fifth of their step). Failed evaluations (no loss) are
    marked along the bottom edge; a star marks the best. With several objectives: the first objective as
    the loss function returned it, named with its direction (``error (min), the first objective``), and a
    star on each evaluation of the Pareto front (:func:`propulate.report.fronts.pareto_front_rows`).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned.
    seed : int
        Seed of the sideways spread of categorical points (the figure is reproducible).
    objectives : optional
        The run's objectives, for their names and directions (see
        :func:`propulate.report.fronts.objectives_of`).

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    """
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    params = [c for c in frame.columns if c.startswith("params_")]
    ncols = 2 if len(params) == 4 else min(3, max(len(params), 1))
    nrows = max(math.ceil(len(params) / ncols), 1)
    fig = _figure(4.2 * ncols, 3.4 * nrows + 0.6)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True)).ravel()
    rng = np.random.default_rng(seed)
    states = frame["state"].to_numpy()
    complete = states == "COMPLETE"
    goals = objectives_of(frame, objectives)
    if goals is None:
        losses = frame["value"].to_numpy(dtype=np.float64)
        best = int(np.nanargmin(np.where(complete, losses, np.nan))) if complete.any() else -1
        marked = np.array([best] if best >= 0 else [], dtype=np.int64)
        mark = {"s": 160, "label": f"best (loss {losses[best]:.4g})" if best >= 0 else ""}
        ylabel, what = "loss (lower is better)", "Loss"
    else:
        losses = frame["values_0"].to_numpy(dtype=np.float64)
        marked = frame.index.get_indexer(pareto_front_rows(frame, goals).index)
        mark = {"s": 70, "label": f"Pareto front ({len(marked)})"}
        ylabel = f"{objective_labels(goals)[0]}, the first objective"
        what = f"{goals.names[0]} (the first of {len(goals)} objectives)"
    declared = frame.attrs.get("search_space", {})
    for ax, column in zip(axes, params, strict=False):
        values = frame[column]
        domain = declared.get(column[len("params_") :])
        if values.dtype.name == "category" or values.dtype == object:
            codes, choices = category_codes(values, domain)
            x = codes + rng.uniform(-0.2, 0.2, size=len(codes))
            ax.set_xticks(range(len(choices)))
            ax.set_xticklabels([str(c) for c in choices])
            ax.set_xlim(-0.5, len(choices) - 0.5)
        else:
            x = values.to_numpy(dtype=np.float64)
            log_scale = isinstance(domain, dict) and domain.get("log", False)
            undeclared_decades = (
                not isinstance(domain, dict)
                and len(x)
                and np.nanmin(x) > 0
                and np.nanmax(x) > 100 * np.nanmin(x)
            )
            if log_scale or undeclared_decades:
                ax.set_xscale("log")
            elif values.dtype.kind in "iu":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if values.dtype.kind in "iu":
                # Spread sideways by up to a fifth of the step, so that equal values do not hide each other.
                step = (domain.get("step") if isinstance(domain, dict) else None) or 1
                x = x + rng.uniform(-0.2, 0.2, size=len(x)) * step
        for state in ("COMPLETE", "PRUNED"):
            mask = states == state
            if mask.any():
                ax.scatter(x[mask], losses[mask], color=COLORS[state], label=LABELS[state], **_dots(len(x)))
        failed = states == "FAIL"
        if failed.any():
            # A strip along the bottom edge, whatever the loss scale: x in data, y in axes coordinates.
            strip = Rectangle((0.0, 0.0), 1.0, 0.06, transform=ax.transAxes, color=COLORS["FAIL"], alpha=0.08)
            ax.add_patch(strip)
            ax.scatter(
                x[failed],
                np.full(failed.sum(), 0.03),
                marker="x",
                s=18,
                color=COLORS["FAIL"],
                transform=ax.get_xaxis_transform(),
                label=LABELS["FAIL"],
            )
        if len(marked):
            ax.scatter(x[marked], losses[marked], marker="*", color="gold", edgecolor="black", **mark)
        ax.set_xlabel(column[len("params_") :])
        ax.grid(True, alpha=0.3)
        # Room along the bottom edge for the strip of failed evaluations.
        ax.set_ymargin(0.1)
    for ax in axes[len(params) :]:
        ax.set_visible(False)
    for ax in axes[::ncols]:
        ax.set_ylabel(ylabel)
    _loss_scale(axes[0], losses[complete])
    if not np.isfinite(losses).any():
        axes[0].set_yticks([])  # shared by every panel
        for ax in axes[: len(params)]:
            ax.text(0.5, 0.5, "no loss to show", transform=ax.transAxes, ha="center", va="center")
    if params:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles))
    fig.suptitle(f"{what} against each parameter ({int(np.isin(states, list(LABELS)).sum()):,} evaluations)")
    return fig


def plot_front(frame: pd.DataFrame, objectives: Any = None) -> Figure:
    """Return the figure of the completed evaluations in objective space, the Pareto front highlighted.

    Values as the loss function returned them, each axis named with its objective's direction (``error
    (min)``); the front is :func:`propulate.report.fronts.pareto_front_rows`. Two objectives: one scatter of
    every completed evaluation, the front's points highlighted and joined by the staircase that bounds what
    they dominate. Three or more: one panel per pair of objectives, each a projection of the same points (a
    front point may look dominated in a projection). One objective: its values against the evaluations'
    ``number``.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned for a run with several objectives.
    objectives : optional
        The run's objectives, for their names and directions (see
        :func:`propulate.report.fronts.objectives_of`).

    Raises
    ------
    ValueError
        If the frame is of a run with one loss.
    ImportError
        If matplotlib is not installed.
    """
    goals = _goals(frame, objectives)
    labels = objective_labels(goals)
    numbers, values, front = front_points(frame, goals)
    pairs = [(i, j) for i in range(len(goals)) for j in range(i + 1, len(goals))] or [(-1, 0)]
    ncols = min(3, len(pairs))
    nrows = math.ceil(len(pairs) / ncols)
    fig = _figure(6.5 if len(pairs) == 1 else 4.2 * ncols, (5.0 if len(pairs) == 1 else 3.6 * nrows) + 0.6)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    others = np.setdiff1d(np.arange(len(values)), front)
    for ax, (i, j) in zip(axes, pairs, strict=False):
        x = numbers if i < 0 else values[:, i]
        ax.scatter(
            x[others], values[others, j], color=COLORS["COMPLETE"], label="completed", **_dots(len(values))
        )
        if len(front) and len(pairs) == 1 and i >= 0:
            line = staircase(values[front][:, [i, j]])
            label = "bound of what the front dominates"
            ax.plot(line[:, 0], line[:, 1], color="black", linewidth=1.2, label=label)
        if len(front):
            ax.scatter(
                x[front],
                values[front, j],
                s=36,
                color="gold",
                edgecolor="black",
                zorder=3,
                label="Pareto front",
            )
        ax.set_xlabel("evaluation (number: in order of start)" if i < 0 else labels[i])
        ax.set_ylabel(labels[j])
        ax.grid(True, alpha=0.3)
        if not len(values):
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, "no completed evaluation", transform=ax.transAxes, ha="center", va="center")
    for ax in axes[len(pairs) :]:
        ax.set_visible(False)
    if len(values):
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncols=len(handles))
    projections = "; each panel a projection" if len(pairs) > 1 else ""
    fig.suptitle(
        f"Pareto front: {len(front):,} of {len(values):,} completed evaluations non-dominated{projections}"
    )
    return fig


def plot_hypervolume(
    frame: pd.DataFrame, objectives: Any = None, reference: Sequence[float] | None = None
) -> Figure:
    """Return the figure of the hypervolume of the Pareto front so far, against evaluations and time.

    The hypervolume (:func:`propulate.report.fronts.hypervolume_history`) after every completed evaluation, in
    the order they completed, or after each of 1,000 evenly spaced numbers of them when there are more,
    drawn as a step line; time is wall-clock time while running, as in :func:`plot_best_loss`. The
    reference point is stated in the title: ``reference`` (one number per objective in its own direction)
    or by default 10 % of each objective's range beyond its worst completed value
    (:func:`propulate.report.fronts.reference_point`).

    Raises
    ------
    ValueError
        If the frame is of a run with one loss, or ``reference`` is not one finite number per objective.
    ImportError
        If matplotlib is not installed.
    """
    goals = _goals(frame, objectives)
    completed = int((frame["state"] == "COMPLETE").sum())
    history = hypervolume_history(frame, goals, reference, points=None if completed <= 1000 else 1000)
    _, end, offsets = running_clock(frame)
    at = end[frame.index.get_indexer(history["number"])]
    scale, unit = time_unit(float(np.nanmax(end)) if np.isfinite(end).any() else 0.0)
    fig = _figure(11.0, 4.5)
    by_count, by_time = fig.subplots(1, 2, sharey=True)
    volume = history["hypervolume"].to_numpy()
    for ax, x in ((by_count, history["completed"].to_numpy()), (by_time, at / scale)):
        ax.step(
            x, volume, where="post", color="black", linewidth=1.8, label="hypervolume of the front so far"
        )
        ax.grid(True, alpha=0.3)
        if not len(history):
            _nothing_to_draw(ax, "no completed evaluation")
    by_count.set_xlabel("completed evaluations (in order of completion)")
    by_count.set_ylabel("hypervolume (higher is better)")
    by_count.set_title("Hypervolume vs. evaluations")
    _mark_sessions(by_time, offsets, scale)
    by_time.set_xlabel(f"wall-clock time while running [{unit}]")
    by_time.set_title("Hypervolume vs. time")
    ref = goals.values(history.attrs["reference"])
    where = ", ".join(
        f"{label} {value:.4g}" for label, value in zip(objective_labels(goals), ref, strict=True)
    )
    rule = "" if reference is not None else " (10 % of each range beyond the worst completed value)"
    final = f"final {volume[-1]:.6g}" if len(volume) else "no completed evaluation"
    fig.suptitle(f"Hypervolume of the Pareto front so far: {final}\nreference point {where}{rule}")
    return fig


def _goals(frame: pd.DataFrame, objectives: Any) -> Objectives:
    goals = objectives_of(frame, objectives)
    if goals is None:
        raise ValueError("frame: a run with one loss; the Pareto front needs several objectives")
    return goals


#: The figures :func:`save_figures` writes: file name -> function drawing it.
FIGURES = {
    "best_loss.png": plot_best_loss,
    "timeline.png": plot_timeline,
    "parameters.png": plot_parameters,
}
#: The figures :func:`save_figures` writes for a run with several objectives.
MULTI_OBJECTIVE_FIGURES = {
    "front.png": plot_front,
    "hypervolume.png": plot_hypervolume,
    "timeline.png": plot_timeline,
    "parameters.png": plot_parameters,
}


def save_figures(
    frame: pd.DataFrame,
    directory: str | Path,
    dpi: int = 120,
    objectives: Any = None,
    reference: Sequence[float] | None = None,
) -> list[Path]:
    """Write every figure of :data:`FIGURES` as a PNG file into ``directory`` (created if missing).

    For a run with several objectives, the figures of :data:`MULTI_OBJECTIVE_FIGURES` instead.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned.
    directory : str or pathlib.Path
        Where to write.
    dpi : int >= 1
        Resolution in dots per inch.
    objectives : optional
        The run's objectives, for their names and directions (see
        :func:`propulate.report.fronts.objectives_of`).
    reference : sequence of float, optional
        The hypervolume's reference point (see :func:`plot_hypervolume`).

    Returns
    -------
    list of pathlib.Path
        The files written.

    Raises
    ------
    ValueError
        If ``dpi`` is not a positive integer, or ``reference`` is not one finite number per objective.
    ImportError
        If matplotlib is not installed.
    """
    if isinstance(dpi, bool) or not isinstance(dpi, int) or dpi < 1:
        raise ValueError(f"dpi: expected a positive integer, got {dpi!r}")
    goals = objectives_of(frame, objectives)
    if goals is None:
        figures = {name: draw(frame) for name, draw in FIGURES.items()}
    else:
        figures = {
            "front.png": plot_front(frame, goals),
            "hypervolume.png": plot_hypervolume(frame, goals, reference),
            "timeline.png": plot_timeline(frame),
            "parameters.png": plot_parameters(frame, objectives=goals),
        }
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fig in figures.items():
        path = directory / name
        fig.savefig(path, dpi=dpi)
        written.append(path)
    return written
