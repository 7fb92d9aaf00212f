"""The plain-text report of a run: ``python -m propulate report``.

:func:`format_report` lists the best distinct configurations with their metrics, the evaluations per state
and per island, the sessions, the throughput and each worker's utilization (the numbers of
:mod:`propulate.report.summary`, defined there); for a population-based training also its members and the
schedule of the best member's state (:mod:`propulate.report.lineage`).

With several objectives (:mod:`propulate.objectives`) the report lists, instead of the best configurations,
the run's Pareto front (:func:`~propulate.report.fronts.pareto_front_rows`) and the hypervolume of the front
so far as the run went on (:func:`~propulate.report.fronts.hypervolume_history`), up to a reference point
(:func:`~propulate.report.fronts.reference_point`): by default, 10 % of the range of each objective's
completed values beyond its worst completed value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .frame import FINISHED, metric_columns, require_pandas
from .fronts import REFERENCE_MARGIN, hypervolume_history, objective_labels, objectives_of, pareto_front_rows
from .lineage import best_schedule, has_lineage, member_summary
from .summary import (
    best,
    configuration_table,
    evaluations_per_hour,
    island_summary,
    repeated,
    session_spans,
    status_counts,
    time_unit,
    utilization,
)

if TYPE_CHECKING:
    import pandas as pd

    from ..objectives import Objectives

__all__ = ["FRONT_ROWS", "format_report"]

#: Reports list at most this many rows of the Pareto front by default.
FRONT_ROWS = 20


def format_report(
    frame: pd.DataFrame,
    top: int | None = None,
    title: str = "propulate results",
    notes: Sequence[str] = (),
    objectives: Any = None,
    reference: Sequence[float] | None = None,
) -> str:
    """Return the plain-text report: top configurations, counts, throughput and utilization.

    With several objectives, instead of the top configurations: the Pareto front
    (:func:`~propulate.report.fronts.pareto_front_rows`; each objective's values as the loss function
    returned them, under its name and direction, e.g. ``error (min)``, sorted by the first objective, best
    first), then the hypervolume of the front so far after each tenth of the completed evaluations
    (:func:`~propulate.report.fronts.hypervolume_history`) with its reference point stated: ``reference`` if
    given, else 10 % of each objective's range beyond its worst completed value
    (:func:`~propulate.report.fronts.reference_point`). Per island, ``on_front`` and each objective's best
    value replace ``best_value`` (:func:`~propulate.report.summary.island_summary`).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`~propulate.report.frame.to_dataframe` returned.
    top : int >= 1, optional
        How many of the best distinct configurations to list (default 5); with several objectives, how many
        rows of the Pareto front at most (default :data:`FRONT_ROWS`, 20).
    title : str
        First line of the report.
    notes : sequence of str
        Lines to show under the title (e.g. the run's configuration).
    objectives : optional
        The run's objectives, for their names and directions (see
        :func:`~propulate.report.fronts.objectives_of`).
    reference : sequence of float, optional
        The hypervolume's reference point, one number per objective in its own direction.

    Returns
    -------
    str
        Fixed-width text, about 90 characters wide plus about 10 per parameter.

    Raises
    ------
    ValueError
        If ``top`` is not a positive integer, or ``reference`` is not one finite number per objective.
    """
    pd = require_pandas()
    goals = objectives_of(frame, objectives)
    if goals is None:
        best_rows = best(frame, 5 if top is None else top)
    elif top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"top: expected a positive integer, got {top!r}")
    lines = [title, "=" * len(title), *notes]
    spans = session_spans(frame)
    finished = int(frame["state"].isin(FINISHED).sum())
    if len(spans):
        total = float(spans["span_s"].sum())
        scale, unit = time_unit(total)
        lines += [
            f"{finished} finished evaluations by {spans['workers'].max()} worker(s), {len(spans)} session(s)",
            f"from {spans['start'].min():%Y-%m-%d %H:%M:%S} to {spans['end'].max():%Y-%m-%d %H:%M:%S} UTC, "
            f"{total / scale:.3g} {unit} of wall-clock time while running",
        ]
    else:
        lines.append("no finished evaluations")
    unfinished = len(frame) - finished
    if unfinished:
        lines.append(f"{unfinished} evaluation(s) cut short by the end of the job, redone on resume")

    n_complete = int((frame["state"] == "COMPLETE").sum())
    if goals is None:
        lines += [
            "",
            f"Best {len(best_rows)} distinct configuration(s) of {n_complete} completed evaluations",
        ]
        if len(best_rows):
            metrics = [c for c in metric_columns(frame) if best_rows[c].notna().any()]
            shown = configuration_table(frame, best_rows, metrics)
            shown.insert(0, "#", range(1, len(shown) + 1))
            lines += _indent(shown.to_string(index=False, float_format=_number))
    else:
        front = pareto_front_rows(frame, goals)
        lines += _front_lines(frame, goals, front, FRONT_ROWS if top is None else top, reference)

    if has_lineage(frame):
        lines += _lineage_lines(frame)

    lines += ["", "Evaluations by state"]
    lines += _indent(status_counts(frame).rename_axis(None).to_string())
    on_island, in_all = repeated(frame)
    lines.append(
        f"  {on_island} repeated a configuration evaluated before on their island ({in_all} in all islands)"
    )

    if goals is None:
        islands = island_summary(frame).reset_index()
    else:
        islands = island_summary(frame, goals, front=front).reset_index()
    lines += ["", "Evaluations by island (where they were bred)"]
    lines += _indent(islands.to_string(index=False, float_format=_number, na_rep="-"))

    if len(spans) > 1:
        scale, unit = time_unit(float(spans["span_s"].max()))
        sessions = spans.assign(
            span=spans["span_s"] / scale,
            start=spans["start"].dt.strftime("%Y-%m-%d %H:%M:%S"),
            end=spans["end"].dt.strftime("%Y-%m-%d %H:%M:%S"),
        ).reset_index()
        sessions = sessions[["session", "start", "end", "span", "workers", "evaluations"]]
        sessions = sessions.rename(columns={"span": f"span [{unit}]"})
        lines += ["", "Sessions (a resumed run has several; times in UTC)"]
        lines += _indent(sessions.to_string(index=False, float_format=lambda x: f"{x:.4g}"))

    per_hour = evaluations_per_hour(frame)
    rate = f"{per_hour:,.0f}" if per_hour >= 100 else f"{per_hour:.3g}"
    lines += ["", f"Throughput: {rate} evaluations per hour of wall-clock time while running"]

    per_worker, overall = utilization(frame)
    lines += ["", "Worker utilization: time evaluating / time of the sessions the worker evaluated in"]
    if len(per_worker):
        scale, unit = time_unit(float(per_worker["available_s"].max()))
        table = pd.DataFrame(
            {
                "island": per_worker.index.get_level_values("island").astype(str),
                "worker": per_worker.index.get_level_values("worker").astype(str),
                "evaluations": per_worker["evaluations"].to_numpy(),
                f"busy [{unit}]": per_worker["busy_s"].to_numpy() / scale,
                f"available [{unit}]": per_worker["available_s"].to_numpy() / scale,
                "utilization": per_worker["utilization"].to_numpy(),
            }
        )
        table.loc[len(table)] = ["all", "", *table.iloc[:, 2:5].sum().tolist(), overall]
        table["utilization"] = table["utilization"].map(lambda u: f"{100.0 * u:.1f} %")
        lines += _indent(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return "\n".join(lines) + "\n"


def _lineage_lines(frame: pd.DataFrame) -> list[str]:
    """Population-based training: the members, and the schedule that trained the best member's state."""
    lines = ["", "Population-based training: members (intervals, steps reached, exploits, losses)"]
    lines += _indent(member_summary(frame).reset_index().to_string(index=False, float_format=_number))
    schedule = best_schedule(frame)
    if len(schedule):
        lines += ["", "Schedule of the best member's state (its intervals and those it was copied from)"]
        lines += _indent(schedule.to_string(index=False, float_format=_number))
    return lines


def _front_lines(
    frame: pd.DataFrame, goals: Objectives, front: pd.DataFrame, rows: int, reference: Sequence[float] | None
) -> list[str]:
    """Return the report's sections of a run with several objectives: its Pareto front, the hypervolume."""
    labels = objective_labels(goals)
    n_complete = int((frame["state"] == "COMPLETE").sum())
    lines = [
        "",
        f"Pareto front: {len(front)} distinct non-dominated configuration(s) of {n_complete} completed "
        "evaluations",
        f"  objectives: {', '.join(labels)}; sorted by {labels[0]}, best first"
        + (f"; the first {rows} of {len(front)} shown" if len(front) > rows else ""),
    ]
    if not len(front):
        return lines
    shown_rows = front.head(rows)
    metrics = [c for c in metric_columns(frame) if shown_rows[c].notna().any()]
    shown = configuration_table(frame, shown_rows, metrics, goals)
    shown.insert(0, "#", range(1, len(shown) + 1))
    lines += _indent(shown.to_string(index=False, float_format=_number))

    history = hypervolume_history(frame, goals, reference)
    ref = goals.values(history.attrs["reference"])
    where = ", ".join(f"{label} {value:.6g}" for label, value in zip(labels, ref, strict=True))
    rule = (
        "given"
        if reference is not None
        else f"default: {100 * REFERENCE_MARGIN:g} % of each objective's range beyond its worst completed "
        "value"
    )
    lines += [
        "",
        "Hypervolume of the Pareto front so far (completed evaluations in the order they completed)",
        f"  reference point: {where} ({rule})",
    ]
    table = history.assign(datetime_complete=history["datetime_complete"].dt.strftime("%Y-%m-%d %H:%M:%S"))[
        ["completed", "datetime_complete", "front_size", "hypervolume"]
    ]
    table.columns = ["completed", "at (UTC)", "front size", "hypervolume"]
    lines += _indent(table.to_string(index=False, float_format=_number))
    if history["hypervolume"].iloc[-1] == 0.0:
        lines.append("  no completed evaluation dominates the reference point")
    return lines


def _number(x: float) -> str:
    return f"{x:.6g}"


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]
