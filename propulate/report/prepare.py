"""What the figures of a run compute from its frame before drawing, shared by both kinds of figures.

The PNG figures (:mod:`propulate.report.plots`, matplotlib) and the HTML report
(:mod:`propulate.report.html`, plotly) draw the same quantities; they take them from here, so that the two
agree:

- :func:`running_clock`: times on the clock *while running*, the sessions of a resumed run put end to end
  (the time the job was not running between them left out);
- :func:`loss_history`: the finished evaluations in the order they finished, with the best loss so far;
- :func:`category_codes`: a categorical parameter's values as positions on an axis, in the order of its
  choices;
- :func:`front_points` and :func:`staircase`: the completed evaluations in objective space, the Pareto
  front among them, and the boundary of what a front of two objectives dominates.

No MPI and no plotting library; pandas is needed, as for the frame itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .frame import epoch_seconds, value_columns
from .fronts import pareto_front_rows
from .summary import session_spans

if TYPE_CHECKING:
    import pandas as pd

    from ..objectives import Objectives

__all__ = [
    "Clock",
    "LossHistory",
    "category_codes",
    "front_points",
    "loss_history",
    "running_clock",
    "staircase",
]


class Clock(NamedTuple):
    """Times of a run on the clock while running, in seconds from the start of its first session."""

    #: Start of each evaluation (row of the frame), shape (n_rows,); NaN for one that never finished.
    start: np.ndarray
    #: End of each evaluation, shape (n_rows,); NaN for one that never finished.
    end: np.ndarray
    #: Start of each session, shape (n_sessions,), in the order of the sessions; the first is 0.
    sessions: np.ndarray


class LossHistory(NamedTuple):
    """The finished evaluations of a run with one loss, in the order they finished (ties by row)."""

    #: Their positions in the frame, shape (n,).
    rows: np.ndarray
    #: Their ends on the clock while running (:attr:`Clock.end`), seconds, shape (n,).
    end: np.ndarray
    #: Their ``state``: ``COMPLETE``, ``PRUNED`` or ``FAIL``, shape (n,).
    states: np.ndarray
    #: Their ``value``, NaN for a failed one, shape (n,).
    losses: np.ndarray
    #: The lowest loss of a completed evaluation among the first ``i + 1``; ``inf`` before the first.
    best: np.ndarray
    #: Start of each session on the clock while running (:attr:`Clock.sessions`).
    sessions: np.ndarray


def running_clock(frame: pd.DataFrame) -> Clock:
    """Return start and end of each evaluation and start of each session, in seconds while running.

    The sessions are put end to end in order; evaluations that never finished get NaN.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned.
    """
    spans = session_spans(frame)
    origin = epoch_seconds(spans["start"])
    # Where each session starts on the running clock: after the spans of the sessions before it.
    offset = np.concatenate(([0.0], np.cumsum(spans["span_s"].to_numpy())[:-1]))
    where = np.searchsorted(spans.index.to_numpy(), frame["session"].to_numpy())
    where = np.minimum(where, max(len(spans) - 1, 0))
    shift = (offset[where] - origin[where]) if len(spans) else np.zeros(len(frame))
    start = epoch_seconds(frame["datetime_start"]) + shift
    end = epoch_seconds(frame["datetime_complete"]) + shift
    return Clock(start, end, offset)


def loss_history(frame: pd.DataFrame) -> LossHistory:
    """Return the finished evaluations of a run with one loss in the order they finished, best loss so far.

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`propulate.report.frame.to_dataframe` returned for a run with one loss (a ``value``
        column).
    """
    clock = running_clock(frame)
    done = np.flatnonzero(~np.isnan(clock.end))
    done = done[np.argsort(clock.end[done], kind="stable")]
    states = frame["state"].to_numpy()[done]
    losses = frame["value"].to_numpy(dtype=np.float64)[done]
    best = np.fmin.accumulate(np.where(states == "COMPLETE", losses, np.inf)) if len(done) else losses.copy()
    return LossHistory(done, clock.end[done], states, losses, best, clock.sessions)


def category_codes(values: pd.Series, domain: Any) -> tuple[np.ndarray, list[Any]]:
    """Return the category index of each value (float) and the categories, in the order of the choices.

    Parameters
    ----------
    values : pandas.Series
        A ``params_<name>`` column of a categorical parameter.
    domain : dict or None
        The parameter's entry of the frame's ``attrs["search_space"]``: its ``choices`` give the order.
        Without it, the order in which the values first appear; a value not among the choices gets -1.
    """
    if values.dtype.name == "category":
        return values.cat.codes.to_numpy().astype(np.float64), list(values.cat.categories)
    if isinstance(domain, dict) and "choices" in domain:
        choices = list(domain["choices"])
    else:  # no search space known: the order of first appearance
        choices = list(dict.fromkeys((type(v), v) for v in values))
        choices = [v for _, v in choices]
    index = {(type(c), c): i for i, c in enumerate(choices)}
    codes = np.array([index.get((type(v), v), -1) for v in values], dtype=np.float64)
    return codes, choices


def front_points(frame: pd.DataFrame, goals: Objectives) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the completed evaluations' numbers, objective values as returned, shape (n, M), and the front.

    The front (:func:`propulate.report.fronts.pareto_front_rows`) is given as indices into the first two
    arrays, best first in the first objective.
    """
    complete = frame.loc[frame["state"] == "COMPLETE"]
    values = complete[value_columns(goals)].to_numpy(dtype=np.float64)
    front = complete.index.get_indexer(pareto_front_rows(frame, goals).index)
    return complete["number"].to_numpy(), values, front


def staircase(points: np.ndarray) -> np.ndarray:
    """Return the corners of the boundary of what a 2-objective front dominates, front points included.

    ``points`` are the front, best first in the first objective (so worst first in the second): from each
    point the boundary runs parallel to the first objective's axis, to the next point's value, then
    parallel to the second's, to the next point.
    """
    if len(points) < 2:
        return points
    corners = np.column_stack((points[1:, 0], points[:-1, 1]))
    return np.concatenate([np.stack((points[:-1], corners), axis=1).reshape(-1, 2), points[-1:]])
