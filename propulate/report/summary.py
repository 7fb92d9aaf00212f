"""The numbers of a run that the reports show, computed from the frame of :mod:`propulate.report.frame`.

The best configurations (:func:`best`, :func:`configuration_table`), evaluations per state and per island
(:func:`status_counts`, :func:`island_summary`, :func:`repeated`), and the run's time (:func:`session_spans`,
:func:`evaluations_per_hour`, :func:`utilization`):

- the *span* of a session is the wall-clock time from the start of its first evaluation to the end of its
  last; a resumed run has several sessions, and the hours the job was not running between them count
  nowhere. Evaluations per hour divide the number of evaluations by the sum of the spans;
- the *utilization* of a worker is the time it spent evaluating divided by the spans of the sessions in
  which it evaluated anything; overall, the summed evaluation periods divided by the sum over sessions of
  (workers that evaluated in that session x the session's span). The rest of a worker's time went to
  breeding, communication, checkpointing, and waiting for the job to start or end.

The text report, the figures and the HTML report all take these numbers from here. No MPI; pandas is
needed, as for the frame itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .frame import FINISHED, UNFINISHED, require_pandas, value_columns
from .fronts import objective_labels, objectives_of, pareto_front_rows

if TYPE_CHECKING:
    import pandas as pd

    from ..objectives import Objectives

__all__ = [
    "best",
    "configuration_table",
    "evaluations_per_hour",
    "island_summary",
    "repeated",
    "session_spans",
    "status_counts",
    "time_unit",
    "utilization",
]


def best(frame: pd.DataFrame, n: int = 5, distinct: bool = True) -> pd.DataFrame:
    """Return the ``n`` completed evaluations of lowest value, best first (ties by ``number``).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`~propulate.report.frame.to_dataframe` returned.
    n : int >= 1
        How many rows at most.
    distinct : bool
        List each configuration (the same parameter values) once, with its best evaluation.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer, or the frame is of a run with several objectives (no ``value``
        column; :func:`~propulate.report.fronts.pareto_front_rows` lists its best evaluations).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive integer, got {n!r}")
    if objectives_of(frame) is not None:
        raise ValueError(
            "frame: a run with several objectives (columns values_0, values_1, ...) has no single best "
            "evaluation; pareto_front_rows(frame) lists its Pareto front"
        )
    complete = frame.loc[frame["state"] == "COMPLETE", ["value", "number"]]
    ranked = complete.sort_values(["value", "number"], kind="stable").index
    if distinct:
        params = [c for c in frame.columns if c.startswith("params_")]
        ranked = frame.loc[ranked, params].drop_duplicates().index
    return frame.loc[ranked[:n]]


def configuration_table(
    frame: pd.DataFrame, rows: pd.DataFrame, metrics: Sequence[str], objectives: Any = None
) -> pd.DataFrame:
    """Return ``rows`` of ``frame`` as the reports list configurations.

    The columns: number, loss, the ``metrics`` columns, where each was bred, then the parameters, under
    their short names (``accuracy``, ``lr``; not ``user_attrs_accuracy``, ``params_lr``). With several
    objectives (see :func:`~propulate.report.fronts.objectives_of` for ``objectives``), one column per
    objective instead of the loss, named by :func:`~propulate.report.fronts.objective_labels` (``error
    (min)``), holding the values as the loss function returned them.
    """
    params = [c for c in frame.columns if c.startswith("params_")]
    goals = objectives_of(frame, objectives)
    values = ["value"] if goals is None else value_columns(goals)
    table = rows[["number", *values, *metrics, "island", "worker", "generation", *params]]
    return table.set_axis(
        [
            "number",
            *(["loss"] if goals is None else objective_labels(goals)),
            *(c[len("user_attrs_") :] for c in metrics),
            "island",
            "worker",
            "generation",
            *(c[len("params_") :] for c in params),
        ],
        axis=1,
    )


def repeated(frame: pd.DataFrame) -> tuple[int, int]:
    """Return how many finished evaluations repeat a configuration evaluated before: on their island, in all.

    A configuration is the parameter values; evaluations are ordered by ``number``. An evaluation counts
    as repeating one on its island when an earlier evaluation bred on the same island has the same values
    (propulate breeds none, see :mod:`propulate.breeding`), and in all when any earlier one has (islands
    that exchange no individuals may meet the same configuration).
    """
    params = [c for c in frame.columns if c.startswith("params_")]
    done = frame.loc[frame["state"].isin(FINISHED)].sort_values("number", kind="stable")
    return int(done.duplicated(["island", *params]).sum()), int(done.duplicated(params).sum())


def status_counts(frame: pd.DataFrame) -> pd.Series:
    """Return the number of evaluations per ``state``: the finished states always, the others if present."""
    counts = frame["state"].value_counts()
    names = [*FINISHED, *(s for s in UNFINISHED if counts.get(s, 0))]
    return counts.reindex(names, fill_value=0).rename("evaluations")


def island_summary(
    frame: pd.DataFrame, objectives: Any = None, front: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Return per birth island: evaluations, how many of each state, and the best completed value.

    With several objectives (see :func:`~propulate.report.fronts.objectives_of` for ``objectives``),
    instead of ``best_value``: ``on_front``, how many rows of
    :func:`~propulate.report.fronts.pareto_front_rows` were bred on the island, and ``best_<name>`` per
    objective, its best completed value in its own direction (a maximized one's largest).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`~propulate.report.frame.to_dataframe` returned.
    objectives : optional
        The run's objectives, for their names and directions.
    front : pandas.DataFrame, optional
        With several objectives, ``pareto_front_rows(frame, objectives)`` if the caller has it already;
        computed when not given.
    """
    table = _island_counts(frame)
    goals = objectives_of(frame, objectives)
    if goals is None:
        complete = frame.loc[frame["state"] == "COMPLETE", ["island", "value"]]
        table["best_value"] = complete.groupby("island")["value"].min().reindex(table.index)
        return table
    return _island_front(frame, goals, pareto_front_rows(frame, goals) if front is None else front, table)


def _island_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Return per birth island: evaluations and how many of each state."""
    pd = require_pandas()
    states = status_counts(frame).index
    table = pd.crosstab(frame["island"], frame["state"]).reindex(columns=states, fill_value=0)
    table.columns = [name.lower() for name in states]
    table.insert(0, "evaluations", table.sum(axis=1))
    return table


def _island_front(
    frame: pd.DataFrame, goals: Objectives, front: pd.DataFrame, table: pd.DataFrame
) -> pd.DataFrame:
    """Add ``on_front`` and ``best_<name>`` to a table of :func:`_island_counts` (several objectives)."""
    table["on_front"] = front.groupby("island").size().reindex(table.index, fill_value=0)
    complete = frame.loc[frame["state"] == "COMPLETE"]
    for name, column, direction in zip(goals.names, value_columns(goals), goals.directions, strict=True):
        by_island = complete.groupby("island")[column]
        best_values = by_island.max() if direction == "maximize" else by_island.min()
        table[f"best_{name}"] = best_values.reindex(table.index)
    return table


def _finished(frame: pd.DataFrame) -> pd.DataFrame:
    """Return the finished evaluations with the columns the time statistics need."""
    columns = ["session", "island", "worker", "datetime_start", "datetime_complete", "duration"]
    return frame.loc[frame["datetime_complete"].notna(), columns]


def session_spans(frame: pd.DataFrame) -> pd.DataFrame:
    """Return per session its first start, last end, span in seconds and number of workers that evaluated.

    Only finished evaluations count; see the module docstring.
    """
    done = _finished(frame)
    groups = done.groupby("session")
    spans = groups.agg(start=("datetime_start", "min"), end=("datetime_complete", "max"))
    spans["span_s"] = (spans["end"] - spans["start"]).dt.total_seconds()
    spans["workers"] = done.drop_duplicates(["session", "island", "worker"]).groupby("session").size()
    spans["evaluations"] = groups.size()
    return spans


def evaluations_per_hour(frame: pd.DataFrame) -> float:
    """Finished evaluations per hour of wall-clock time, over the sum of the session spans; NaN if none."""
    spans = session_spans(frame)
    total = float(spans["span_s"].sum())
    return float(spans["evaluations"].sum()) * 3600.0 / total if total > 0 else math.nan


def utilization(frame: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Return each worker's utilization and the overall one (definitions in the module docstring).

    Returns
    -------
    per_worker : pandas.DataFrame
        Indexed by ``(island, worker)``: ``evaluations``, ``busy_s`` (seconds evaluating), ``available_s``
        (seconds of the sessions it evaluated in) and ``utilization`` (float in [0, 1], NaN without time).
    overall : float in [0, 1]
        Summed evaluation periods over the workers' summed available time; NaN without time.
    """
    done = _finished(frame)
    spans = session_spans(frame)["span_s"]
    busy = done["duration"].dt.total_seconds()
    per_worker = busy.groupby([done["island"], done["worker"]]).agg(["size", "sum"])
    per_worker.columns = ["evaluations", "busy_s"]
    sittings = done[["island", "worker", "session"]].drop_duplicates()
    available = sittings["session"].map(spans).groupby([sittings["island"], sittings["worker"]]).sum()
    per_worker["available_s"] = available
    ratio = per_worker["busy_s"] / per_worker["available_s"]
    per_worker["utilization"] = ratio.where(per_worker["available_s"] > 0)
    total = float(per_worker["available_s"].sum())
    overall = float(per_worker["busy_s"].sum()) / total if total > 0 else math.nan
    return per_worker, overall


def time_unit(seconds: float) -> tuple[float, str]:
    """Return a divisor and unit name that show a duration of ``seconds`` readably: s, min or h."""
    if seconds >= 7200.0:
        return 3600.0, "h"
    if seconds >= 120.0:
        return 60.0, "min"
    return 1.0, "s"
