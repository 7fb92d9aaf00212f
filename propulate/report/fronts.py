"""Pareto fronts in a run's table: the front's rows, the reference point and the hypervolume over time.

Works on the frame of :func:`propulate.report.frame.to_dataframe` of a run with several objectives (columns
``values_0``, ``values_1``, ...; :mod:`propulate.objectives`), for the report, the plots and the HTML report.
No MPI; pandas is needed, as for the frame itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..objectives import Objectives, hypervolume, pareto_ranks
from .frame import epoch_seconds, require_pandas, value_columns

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "HISTORY_POINTS",
    "REFERENCE_MARGIN",
    "hypervolume_history",
    "minimized",
    "non_dominated",
    "objective_labels",
    "objectives_of",
    "pareto_front_rows",
    "reference_point",
]

#: At how many evenly spaced points of the run the report gives the hypervolume of the front so far.
HISTORY_POINTS = 10
#: The default reference point lies this fraction of each objective's range beyond its worst value.
REFERENCE_MARGIN = 0.1


def objectives_of(frame: pd.DataFrame, objectives: Any = None) -> Objectives | None:
    """Return the objectives of the run whose frame this is; ``None`` for a single loss.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned: a ``value`` column for a single loss,
        ``values_0``, ``values_1``, ... for several objectives.
    objectives : optional
        The run's ``objectives`` in any form :meth:`propulate.objectives.Objectives.of` takes, e.g. the
        checkpoint's ``config["objectives"]``, for their names and directions. Without it: the frame's
        ``attrs["objectives"]`` if set, else one minimized objective per ``values_<i>`` column, named so.

    Raises
    ------
    ValueError
        If ``objectives`` has another number of objectives than the frame has ``values_<i>`` columns.
    """
    count = 0
    while f"values_{count}" in frame.columns:
        count += 1
    if "value" in frame.columns or count == 0:
        return None
    goals = Objectives.of(objectives if objectives is not None else frame.attrs.get("objectives"))
    if goals is None:
        return Objectives.of(count)
    if len(goals) != count:
        raise ValueError(
            f"objectives: {len(goals)} objective(s) {list(goals.names)}, but the frame has {count} "
            "values_<i> column(s)"
        )
    return goals


def objective_labels(goals: Objectives) -> list[str]:
    """Return each objective's name with its direction, as the reports show it: ``error (min)``."""
    return [
        f"{name} ({direction[:3]})" for name, direction in zip(goals.names, goals.directions, strict=True)
    ]


def _several(frame: pd.DataFrame, objectives: Any) -> Objectives:
    goals = objectives_of(frame, objectives)
    if goals is None:
        raise ValueError(
            "frame: a run with one loss (a value column); the Pareto front needs several objectives"
        )
    return goals


def minimized(frame: pd.DataFrame, goals: Objectives) -> np.ndarray:
    """Return the objective values of every row, each minimized (maximized ones negated), shape (n, M)."""
    values = frame[value_columns(goals)].to_numpy(dtype=np.float64)
    return values * np.asarray(goals.signs)


def pareto_front_rows(frame: pd.DataFrame, objectives: Any = None) -> pd.DataFrame:
    """Return the rows of the run's Pareto front: the completed evaluations no other completed one dominates.

    Dominance is over every objective with its direction applied (:mod:`propulate.objectives`), as
    :func:`propulate.objectives.pareto_front` decides it. Distinct: of rows with equal parameters and equal
    objective values, the one of lowest ``number`` counts.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned for a run with several objectives.
    objectives : optional
        Their names and directions (see :func:`objectives_of`).

    Returns
    -------
    pandas.DataFrame
        Those rows of ``frame``, best first in the first objective, ties by ``number``.

    Raises
    ------
    ValueError
        If the frame is of a run with one loss.
    """
    goals = _several(frame, objectives)
    params = [c for c in frame.columns if c.startswith("params_")]
    complete = frame.loc[frame["state"] == "COMPLETE"].sort_values("number", kind="stable")
    distinct = complete.drop_duplicates([*params, *value_columns(goals)])
    front = distinct.loc[non_dominated(minimized(distinct, goals))]
    order = np.lexsort((front["number"].to_numpy(), minimized(front, goals)[:, 0]))
    return front.iloc[order]


def non_dominated(points: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Return which rows of ``points``, shape (n, M), no other row dominates (minimizing every objective).

    The same as ``pareto_ranks(points) == 0`` (:func:`propulate.objectives.pareto_ranks`), in a fraction
    of its time for many points: ranked in chunks of ``chunk`` rows, each with the front so far, as the
    front of a union is the front of the union of the parts' fronts.
    """
    front = np.zeros(0, dtype=np.int64)
    for start in range(0, len(points), chunk):
        candidates = np.concatenate((front, np.arange(start, min(start + chunk, len(points)))))
        front = candidates[pareto_ranks(points[candidates]) == 0]
    mask = np.zeros(len(points), dtype=bool)
    mask[front] = True
    return mask


def reference_point(
    frame: pd.DataFrame, objectives: Any = None, reference: Sequence[float] | None = None
) -> tuple[float, ...]:
    """Return the reference point of the hypervolume, minimized (maximized objectives negated).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned for a run with several objectives.
    objectives : optional
        Their names and directions (see :func:`objectives_of`).
    reference : sequence of float, optional
        One finite number per objective, in the objective's own direction: the hypervolume counts what
        lies below it for a minimized objective and above it for a maximized one. Default: for each
        objective, minimized, the worst value of a completed evaluation plus :data:`REFERENCE_MARGIN` (a
        tenth) of the range of the completed values (of the worst value's magnitude when they are all
        equal, and 1 when they are all 0), so that every point of the front counts; NaN without a
        completed evaluation. Taken over the whole run, so that the hypervolumes at different times of
        the run compare.

    Raises
    ------
    ValueError
        If the frame is of a run with one loss, or ``reference`` does not hold one finite number per
        objective.
    """
    goals = _several(frame, objectives)
    signs = np.asarray(goals.signs)
    if reference is not None:
        given = np.asarray(reference, dtype=np.float64)
        if given.shape != (len(goals),) or not np.isfinite(given).all():
            raise ValueError(
                f"reference: expected {len(goals)} finite numbers, one per objective "
                f"{objective_labels(goals)}, got {list(reference)}"
            )
        return tuple((given * signs).tolist())
    points = minimized(frame.loc[frame["state"] == "COMPLETE"], goals)
    point = []
    for column in points.T:
        finite = column[np.isfinite(column)]
        if not len(finite):
            point.append(math.nan)
            continue
        worst, span = float(finite.max()), float(finite.max() - finite.min())
        margin = span if span > 0 else (abs(worst) or 1.0)
        point.append(worst + REFERENCE_MARGIN * margin)
    return tuple(point)


def hypervolume_history(
    frame: pd.DataFrame,
    objectives: Any = None,
    reference: Sequence[float] | None = None,
    points: int | None = HISTORY_POINTS,
) -> pd.DataFrame:
    """Return the hypervolume of the Pareto front so far at evenly spaced points of the run.

    The ``n`` completed evaluations are taken in the order they completed (``datetime_complete``, ties by
    ``number``); after the first ``k_i = ceil(i n / points)`` of them, ``i = 1, ..., points``, the
    hypervolume they dominate up to the reference point (:func:`propulate.objectives.hypervolume`, with
    every objective minimized; the same value as in the objectives' own directions). It never decreases,
    and the last one is the hypervolume of :func:`pareto_front_rows`.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned for a run with several objectives.
    objectives : optional
        Their names and directions (see :func:`objectives_of`).
    reference : sequence of float, optional
        The reference point in the objectives' own directions; default and rules in
        :func:`reference_point`.
    points : int >= 1 or None
        How many points of the run; ``None``: after every completed evaluation.

    Returns
    -------
    pandas.DataFrame
        One row per point: ``completed`` (``k_i``), ``number`` and ``datetime_complete`` of the ``k_i``-th
        completed evaluation, ``front_size`` (distinct configurations on the front so far, as
        :func:`pareto_front_rows` counts them) and ``hypervolume``. ``attrs["reference"]`` holds the
        reference point, minimized (:func:`reference_point`).

    Raises
    ------
    ValueError
        If the frame is of a run with one loss, ``reference`` is not one finite number per objective, or
        ``points`` is neither ``None`` nor a positive integer.
    """
    pd = require_pandas()
    if points is not None and (isinstance(points, bool) or not isinstance(points, int) or points < 1):
        raise ValueError(f"points: expected a positive integer or None, got {points!r}")
    goals = _several(frame, objectives)
    ref = reference_point(frame, goals, reference)
    params = [c for c in frame.columns if c.startswith("params_")]
    complete = frame.loc[frame["state"] == "COMPLETE"]
    complete = complete.iloc[
        np.lexsort((complete["number"].to_numpy(), epoch_seconds(complete["datetime_complete"])))
    ]
    n = len(complete)
    ends = np.arange(1, n + 1) if points is None else np.unique(-((-np.arange(1, points + 1) * n) // points))
    ends = ends[ends > 0]
    # Equal configurations with equal values count once, as on the front; the first to complete stays.
    firsts = ~complete.duplicated([*params, *value_columns(goals)]).to_numpy()
    values = minimized(complete, goals)
    front = np.zeros(0, dtype=np.int64)  # rows of the front so far: the front of the last front and the new
    sizes, volumes, done = [], [], 0
    for end in ends.tolist():
        new = np.arange(done, end)
        candidates = np.concatenate((front, new[firsts[new]]))
        front = candidates[pareto_ranks(values[candidates].reshape(-1, len(goals))) == 0]
        sizes.append(len(front))
        volumes.append(hypervolume(values[front].reshape(-1, len(goals)), ref) if len(front) else 0.0)
        done = end
    last = ends - 1
    history = pd.DataFrame(
        {
            "completed": ends.astype(np.int64),
            "number": complete["number"].to_numpy()[last],
            "datetime_complete": complete["datetime_complete"].iloc[last].reset_index(drop=True),
            "front_size": np.array(sizes, dtype=np.int64),
            "hypervolume": np.array(volumes, dtype=np.float64),
        }
    )
    history.attrs["reference"] = ref
    return history
