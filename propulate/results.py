"""Results of a run as a pandas DataFrame, CSV/JSON files of it, and the numbers of ``propulate report``.

Everything here works on a login node or in a notebook: it reads the checkpoint with
:func:`propulate.checkpoint.load_checkpoint` and never initializes MPI. pandas is an optional dependency
(``pip install "propulate[export]"``), imported on first use.

The frame has one row per evaluation, with the columns users know from Optuna's ``trials_dataframe()``
followed by propulate's provenance:

``number``
    0-based order of the evaluations by start time, ties broken by ``uid``; equal to the frame's index.
``value``
    The loss. NaN for a failed evaluation (as Optuna leaves a failed trial without value) and for one that
    never finished; for a pruned evaluation the last interim loss (as Optuna does).
``values_0``, ``values_1``, ...
    Instead of ``value`` in a run with several objectives (:mod:`propulate.objectives`), as Optuna names
    them: each objective as the loss function returned it (a maximized one not negated), NaN where
    ``value`` would be. The frame's ``attrs["objectives"]`` holds their names and directions
    (:meth:`propulate.objectives.Objectives.describe`).
``datetime_start``, ``datetime_complete``
    When the evaluation started and finished, timezone-aware UTC timestamps; ``NaT`` if it never finished.
``duration``
    ``datetime_complete - datetime_start`` as a timedelta.
``params_<name>``
    Parameter values as the loss function received them (log scales and steps read back): floats, ints,
    and a categorical as a pandas ``category`` in the order of its choices when all choices are of one type
    (strings, ints, ...); choices of mixed types or with ``None`` as Python objects, each of its own type
    (``True`` stays ``True``, not ``1``; pandas categories cannot hold ``None`` nor tell ``True`` from ``1``).
    The frame's ``attrs["search_space"]`` holds the search space as a checkpoint stores it
    (:meth:`propulate.space.SearchSpace.to_json`), which the plots read for log axes.
``user_attrs_<name>``
    The further numbers (metrics) the loss function returned, named as Optuna names the numbers a trial
    records with ``set_user_attr``; NaN where an evaluation did not return that metric. After them, one
    column per ``_``-prefixed entry of the individuals (free-form data, see :class:`propulate.Individual`),
    e.g. ``user_attrs__origin`` for ``ind["_origin"]``, holding the values as Python objects and ``None``
    where an individual has no such entry.
``system_attrs_fail_reason``
    Only when an evaluation failed: the error it failed with (the last line of the traceback, e.g.
    ``ValueError: broken loss``; :attr:`propulate.Individual.error` holds the traceback), ``None`` for the
    others; Optuna's name for the reason a trial failed.
``state``
    Optuna's trial state names, so that code written for Optuna's frames keeps working: see
    :data:`STATES` (``COMPLETE``, ``PRUNED``, ``FAIL``; ``RUNNING`` for an individual of a live population
    still being evaluated and ``WAITING`` for one whose evaluation a stopped job cut short and that is
    evaluated again first on resume).
``island``, ``worker``, ``generation``
    The birth island, the index of the breeding worker in that island, and that worker's generation counter
    when it bred the individual. The breeding worker also evaluated it, except an evaluation cut short by
    the end of a job, which the resumed run redoes on worker ``current``; the checkpoint does not record
    which worker that was.
``migration_history``
    Where the individual travelled: the islands it visited, e.g. ``"0-2-1"``. Pollination sends copies to
    several islands, so the history can branch; its branches are then listed, separated by spaces
    (``"0-1 0-2"``).
``session``
    The session (run of the job on the checkpoint directory) during which the evaluation ran.
``uid``
    The individual's identifier in the checkpoint (the original's, see below).
``active``
    Whether the individual, or a copy of it, may still be selected for breeding on some island.

Migration and pollination send copies of an individual to other islands, each copy a population member of
its own with its own ``uid``. A copy carries the original's parameters, loss, evaluation times and birth
information, so copies are recognized by (birth island, breeding worker, generation, end of evaluation),
and the frame keeps one row per evaluation: the original's, with the copies' travels in
``migration_history`` and their activity in ``active``.

Report numbers (see :func:`session_spans` and :func:`utilization`):

- the *span* of a session is the wall-clock time from the start of its first evaluation to the end of its
  last; a resumed run has several sessions, and the hours the job was not running between them count
  nowhere. Evaluations per hour divide the number of evaluations by the sum of the spans;
- the *utilization* of a worker is the time it spent evaluating divided by the spans of the sessions in
  which it evaluated anything; overall, the summed evaluation periods divided by the sum over sessions of
  (workers that evaluated in that session x the session's span). The rest of a worker's time went to
  breeding, communication, checkpointing, and waiting for the job to start or end.

With several objectives (:mod:`propulate.objectives`) the report lists, instead of the best configurations,
the run's Pareto front (:func:`pareto_front_rows`) and the hypervolume of the front so far as the run went
on (:func:`hypervolume_history`), up to a reference point (:func:`reference_point`): by default, 10 % of
the range of each objective's completed values beyond its worst completed value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from .checkpoint import Checkpoint, load_checkpoint, make_uid, uid_origin
from .errors import PropulateError
from .fronts import (
    REFERENCE_MARGIN,
    hypervolume_history,
    minimized,
    non_dominated,
    objective_labels,
    objectives_of,
    pareto_front_rows,
    reference_point,
    value_columns,
)
from .individual import Individual, Status
from .objectives import Objectives
from .space import Kind, SearchSpace

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "STATES",
    "NoCheckpointError",
    "best",
    "checkpoint_dataframe",
    "configuration_table",
    "evaluations_per_hour",
    "format_report",
    "hypervolume_history",
    "interim_losses",
    "island_summary",
    "load_dataframe",
    "metric_columns",
    "minimized",
    "non_dominated",
    "objective_labels",
    "objectives_of",
    "pareto_front_rows",
    "read_checkpoint",
    "reference_point",
    "session_spans",
    "status_counts",
    "time_unit",
    "to_dataframe",
    "utilization",
    "write_csv",
    "write_json",
]

#: The ``state`` written for each :class:`~propulate.individual.Status`: Optuna's ``TrialState`` names.
STATES: dict[Status, str] = {
    Status.COMPLETED: "COMPLETE",
    Status.PRUNED: "PRUNED",
    Status.FAILED: "FAIL",
    Status.PENDING: "RUNNING",
    Status.INTERRUPTED: "WAITING",
}

# The order in which the report lists the states; unfinished ones only when present.
_FINISHED = ("COMPLETE", "PRUNED", "FAIL")
_UNFINISHED = ("RUNNING", "WAITING")


class NoCheckpointError(PropulateError, FileNotFoundError):
    """A directory holds no checkpoint files."""


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as err:
        raise ImportError(
            'exporting results needs pandas; install it with: pip install "propulate[export]"'
        ) from err
    return pandas


# ------------------------------------------------------------------------------------------------ the frame


def read_checkpoint(checkpoint_path: str | Path) -> Checkpoint:
    """Read the checkpoint in a directory (no MPI).

    Parameters
    ----------
    checkpoint_path : str or pathlib.Path
        The run's ``checkpoint_path``.

    Returns
    -------
    Checkpoint
        What :func:`propulate.checkpoint.load_checkpoint` reads.

    Raises
    ------
    NoCheckpointError
        (a ``FileNotFoundError``) if the directory does not exist or holds no checkpoint files.
    propulate.checkpoint.CheckpointError
        If a checkpoint file cannot be read.
    """
    directory = Path(checkpoint_path)
    if not directory.is_dir():
        raise NoCheckpointError(f"checkpoint_path: {str(directory)!r} is not a directory")
    checkpoint = load_checkpoint(directory)
    if checkpoint is None:
        raise NoCheckpointError(
            f"checkpoint_path: no checkpoint in {str(directory)!r} (expected files named "
            "propulate-sNNNN-wNNNNNN.h5, written by a run with checkpoint_path set to this directory)"
        )
    return checkpoint


def checkpoint_dataframe(checkpoint: Checkpoint, include_interrupted: bool = False) -> pd.DataFrame:
    """Return the evaluations of a checkpoint as a frame, one row per evaluation (see the module docstring).

    Parameters
    ----------
    checkpoint : Checkpoint
        What :func:`read_checkpoint` returned.
    include_interrupted : bool
        Also list the evaluations a stopped job cut short (state ``WAITING``, no value, no times); they are
        redone on resume. Emigrants still in flight when the job ended are copies and never listed.

    Returns
    -------
    pandas.DataFrame
        One row per evaluation, sorted by ``number``.

    Raises
    ------
    ImportError
        If pandas is not installed.
    """
    individuals = checkpoint.population
    if include_interrupted:
        individuals += [ind for island in sorted(checkpoint.pending) for ind in checkpoint.pending[island]]
    return to_dataframe(individuals, checkpoint.space, checkpoint.config.get("objectives"))


def load_dataframe(checkpoint_path: str | Path, include_interrupted: bool = False) -> pd.DataFrame:
    """Read a checkpoint directory into a frame (:func:`read_checkpoint`, :func:`checkpoint_dataframe`)."""
    return checkpoint_dataframe(read_checkpoint(checkpoint_path), include_interrupted)


def to_dataframe(
    individuals: Iterable[Individual], space: SearchSpace | None = None, objectives: Any = None
) -> pd.DataFrame:
    """Return individuals as a frame, one row per evaluation (see the module docstring for the columns).

    Works on the individuals of a checkpoint as well as on a live ``Propulator.population``; copies made by
    migration or pollination are merged into the row of their original.

    Parameters
    ----------
    individuals : iterable of Individual
        Individuals of one search space, evaluated or not.
    space : SearchSpace, optional
        Their search space; needed only to name the parameter columns of an empty frame.
    objectives : optional
        The run's ``objectives`` (see :class:`propulate.objectives.Objectives`): with several objectives
        the frame has Optuna's columns ``values_0``, ``values_1``, ... (the values as the loss function
        returned them) instead of ``value``. Taken from the individuals when not given (all minimized).

    Returns
    -------
    pandas.DataFrame
        One row per evaluation, sorted by ``number``. Built column-wise from numpy arrays, in a fraction of
        a second for 100,000 individuals.

    Raises
    ------
    ImportError
        If pandas is not installed.
    ValueError
        If the individuals belong to different search spaces.
    """
    pd = _pandas()
    inds = list(individuals)
    if space is None and inds:
        space = inds[0].space
    spaces = {ind.space for ind in inds} | ({space} if space is not None else set())
    if len({s.fingerprint for s in spaces}) > 1:
        raise ValueError("individuals: they belong to different search spaces; export one run at a time")
    n = len(inds)
    uid = np.fromiter(map(attrgetter("uid"), inds), dtype=np.int64, count=n)
    loss = np.fromiter(map(attrgetter("loss"), inds), dtype=np.float64, count=n)
    status = np.fromiter(map(attrgetter("status"), inds), dtype=np.int64, count=n)
    island = np.fromiter(map(attrgetter("island"), inds), dtype=np.int64, count=n)
    worker = np.fromiter(map(attrgetter("rank"), inds), dtype=np.int64, count=n)
    generation = np.fromiter(map(attrgetter("generation"), inds), dtype=np.int64, count=n)
    end = np.fromiter(map(attrgetter("evaltime"), inds), dtype=np.float64, count=n)
    period = np.fromiter(map(attrgetter("evalperiod"), inds), dtype=np.float64, count=n)
    steps = np.fromiter(map(attrgetter("migration_steps"), inds), dtype=np.int64, count=n)
    active = np.fromiter(map(attrgetter("active"), inds), dtype=bool, count=n)
    history = np.array(list(map(attrgetter("migration_history"), inds)), dtype=object)

    # Not finished: no times. Copies share the original's end of evaluation, to the bit.
    end[~np.isfinite(end)] = np.nan
    start = end - period
    keep, history, active = _merge_copies(island, worker, generation, end, uid, steps, history, active)
    order = keep[np.lexsort((uid[keep], np.nan_to_num(start[keep], nan=np.inf)))]
    inverse = np.empty(n, dtype=np.int64)
    inverse[keep] = np.arange(len(keep))
    history, active = history[inverse[order]], active[inverse[order]]

    names = np.empty(max(Status) + 1, dtype=object)
    for status_value, name in STATES.items():
        names[status_value] = name
    state = names[status[order]]
    has_value = np.isin(status[order], [int(Status.COMPLETED), int(Status.PRUNED)])
    kept = [inds[i] for i in order.tolist()]
    columns: dict[str, Any] = {"number": np.arange(len(order))}
    goals = _objectives(objectives, kept)
    if goals is None:
        columns["value"] = np.where(has_value, loss[order], np.nan)
    else:
        columns.update(_value_columns(kept, goals, has_value))
    columns.update(
        {
            # Epoch seconds in float64 resolve about a microsecond: finer digits would be noise.
            "datetime_start": pd.to_datetime(np.round(start[order] * 1e6), unit="us", utc=True),
            "datetime_complete": pd.to_datetime(np.round(end[order] * 1e6), unit="us", utc=True),
        }
    )
    columns["duration"] = columns["datetime_complete"] - columns["datetime_start"]
    if space is not None:
        positions = np.array(list(map(attrgetter("position"), kept))) if kept else np.zeros((0, space.ndim))
        columns.update(_decode_columns(positions, space, pd))
    columns.update(_metric_columns(list(map(attrgetter("metrics"), kept))))
    columns.update(_extra_columns(list(map(attrgetter("extras"), kept))))
    errors = list(map(attrgetter("error"), kept))
    if any(error is not None for error in errors):
        # Optuna's name for why a trial failed; here the error itself, the traceback's last line.
        reasons = np.empty(len(errors), dtype=object)
        reasons[:] = [None if error is None else error.strip().splitlines()[-1] for error in errors]
        columns["system_attrs_fail_reason"] = reasons
    columns.update(
        {
            "state": state,
            "island": island[order],
            "worker": worker[order],
            "generation": generation[order],
            "migration_history": history,
            "session": _session_of(start[order], end[order], uid[order]),
            "uid": uid[order],
            "active": active,
        }
    )
    frame = pd.DataFrame(columns)
    if goals is not None:  # their names and directions, for the report and the plots
        frame.attrs["objectives"] = goals.describe()
    if space is not None:
        frame.attrs["search_space"] = space.to_json()
    return frame


def _merge_copies(
    island: np.ndarray,
    worker: np.ndarray,
    generation: np.ndarray,
    end: np.ndarray,
    uid: np.ndarray,
    steps: np.ndarray,
    history: np.ndarray,
    active: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Find the copies of each evaluation; return the originals' indices, merged histories and activity."""
    n = len(uid)
    if n == 0:
        return np.zeros(0, dtype=np.int64), history, active
    # Group by evaluation; the fewest migration steps first, so each group starts with the original.
    never = np.isnan(end)
    # The bits of the end time; an unfinished individual is only a copy of itself.
    key_end = np.where(never, uid, end.view(np.int64))
    order = np.lexsort((uid, steps, key_end, never, generation, worker, island))
    sorted_keys = np.stack([island[order], worker[order], generation[order], never[order], key_end[order]])
    first = np.ones(n, dtype=bool)
    first[1:] = np.any(sorted_keys[:, 1:] != sorted_keys[:, :-1], axis=0)
    group = np.cumsum(first) - 1
    keep = order[first]
    merged_active = np.zeros(len(keep), dtype=bool)
    np.logical_or.at(merged_active, group, active[order])
    merged_history = history[keep].copy()
    sizes = np.bincount(group)
    multiple = np.flatnonzero(sizes > 1)
    in_order = history[order].tolist()
    for g, first_row, size in zip(
        multiple.tolist(), np.flatnonzero(first)[multiple].tolist(), sizes[multiple].tolist(), strict=True
    ):
        paths = in_order[first_row : first_row + size]
        farthest = paths[-1]  # the most migration steps
        if all(farthest == p or farthest.startswith(p + "-") for p in paths):
            merged_history[g] = farthest  # one journey (migration), the usual case
            continue
        # A branching journey (pollination): a path another one continues is part of that one.
        leaves = {p for p in paths if not any(q.startswith(p + "-") for q in paths)}
        merged_history[g] = " ".join(sorted(leaves))
    return keep, merged_history, merged_active


def _decode_columns(positions: np.ndarray, space: SearchSpace, pd: Any) -> dict[str, Any]:
    """Decode an array of positions, shape ``(n, space.ndim)``, parameter by parameter, as ``decode`` does."""
    columns: dict[str, Any] = {}
    for p in space.parameters:
        if p.kind is Kind.FLOAT:
            column: Any = p.values(positions[:, p.offset]) if p.transformed else positions[:, p.offset].copy()
        elif p.kind is Kind.INT:
            column = p.values(positions[:, p.offset]).astype(np.int64)
        else:
            codes = np.argmax(positions[:, p.offset : p.offset + p.width], axis=1)
            if len({type(c) for c in p.categories}) == 1 and p.categories[0] is not None:
                column = pd.Categorical.from_codes(codes, categories=list(p.categories))
            else:
                choices = np.empty(p.width, dtype=object)
                choices[:] = p.categories
                # dtype object, or pandas 3 makes strings and None a string column and None NaN.
                column = pd.Series(choices[codes], dtype=object)
        columns[f"params_{p.name}"] = column
    return columns


def _objectives(objectives: Any, individuals: Sequence[Individual]) -> Objectives | None:
    """Return the run's objectives: as given, else as many minimized ones as the individuals hold."""
    goals = Objectives.of(objectives)
    if goals is None:
        counts = {len(ind.losses) for ind in individuals if ind.losses is not None}
        if counts:
            goals = Objectives.of(max(counts))
    return goals


def _value_columns(
    individuals: Sequence[Individual], goals: Objectives, has_value: np.ndarray
) -> dict[str, Any]:
    """Optuna's ``values_<i>`` columns: each objective as the loss function returned it, NaN without one."""
    values = np.full((len(individuals), len(goals)), np.nan)
    for row, ind in enumerate(individuals):
        if has_value[row] and ind.losses is not None and len(ind.losses) == len(goals):
            values[row] = goals.values(ind.losses)
    return {f"values_{i}": values[:, i] for i in range(len(goals))}


def _metric_columns(metrics: Sequence[dict[str, float]]) -> dict[str, np.ndarray]:
    columns = {}
    for name in sorted(set().union(*metrics)):
        try:
            values = list(map(itemgetter(name), metrics))  # every evaluation returned it: the usual case
        except KeyError:
            values = [each.get(name, math.nan) for each in metrics]
        columns[f"user_attrs_{name}"] = np.array(values, dtype=np.float64)
    return columns


def _extra_columns(extras: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    columns = {}
    for key in sorted(set().union(*extras)):
        column = np.empty(len(extras), dtype=object)
        for i, each in enumerate(extras):  # one by one: a list value must stay one cell
            column[i] = each.get(key)
        columns[f"user_attrs_{key}"] = column
    return columns


def _session_of(start: np.ndarray, end: np.ndarray, uid: np.ndarray) -> np.ndarray:
    """Return the session each evaluation ran in.

    Sessions run one after another, so the ``k`` sessions that bred the individuals (known from their
    uids) are separated by the ``k - 1`` longest intervals during which no worker was evaluating. An
    evaluation that never finished belongs to the session that bred it.
    """
    bred_in = np.full(len(uid), -1, dtype=np.int64)  # -1: not minted (an individual never checkpointed)
    minted = uid >= 0
    if minted.any():
        # A uid grows with its session: search the first uid of each session instead of decoding each.
        first, last = uid_origin(int(uid[minted].min()))[0], uid_origin(int(uid[minted].max()))[0]
        numbers = np.arange(first, last + 1)
        starts = np.array([make_uid(int(session), 0, 0) for session in numbers], dtype=np.int64)
        bred_in[minted] = numbers[np.searchsorted(starts, uid[minted], side="right") - 1]
    sessions = np.unique(bred_in)
    result = bred_in.copy()
    finished = np.flatnonzero(~np.isnan(end))
    if len(sessions) <= 1 or len(finished) == 0:
        return result
    by_start = finished[np.argsort(start[finished], kind="stable")]
    # Idle time before each evaluation: from the latest end so far to its start (if positive).
    latest_end = np.maximum.accumulate(end[by_start])
    gaps = np.zeros(len(by_start))
    gaps[1:] = start[by_start[1:]] - latest_end[:-1]
    n_cuts = min(len(sessions) - 1, int(np.count_nonzero(gaps > 0)))
    cuts = np.sort(np.argsort(-gaps, kind="stable")[:n_cuts])
    sitting = np.zeros(len(by_start), dtype=np.int64)
    sitting[cuts] = 1
    result[by_start] = sessions[np.cumsum(sitting)]
    return result


# ------------------------------------------------------------------------------------------------- files


def write_csv(frame: pd.DataFrame, target: str | Path | TextIO) -> None:
    """Write the frame as CSV to a path or an open text file: a header row, ISO 8601 times (UTC).

    Read it back with ``pandas.read_csv(path, parse_dates=["datetime_start", "datetime_complete"])`` and
    ``pandas.to_timedelta`` on ``duration``.
    """
    frame.to_csv(target, index=False, date_format="%Y-%m-%dT%H:%M:%S.%f%z")


def write_json(frame: pd.DataFrame, target: str | Path | TextIO) -> None:
    """Write the frame as a JSON array of records to a path or an open text file.

    Times and durations are ISO 8601 strings, NaN is ``null``, floats are written with every digit (the
    shortest text that reads back as the same float; pandas' own writer keeps at most 15 decimal places,
    which leaves a learning rate of ``1.25905012619275e-06`` with 10 significant digits). Read it back
    with ``pandas.read_json(path, orient="records")``.
    """
    text = frame.to_json(orient="records", date_format="iso", date_unit="us")
    records = json.loads(text)
    for column in frame.columns:
        values = frame[column]
        if values.dtype.kind == "f":
            for record, value in zip(records, values.tolist(), strict=True):
                record[column] = value if math.isfinite(value) else None
    if isinstance(target, (str, Path)):
        with open(target, "w", encoding="utf-8") as handle:
            json.dump(records, handle, indent=1)
    else:
        json.dump(records, target, indent=1)


# -------------------------------------------------------------------------------------------- the report


def best(frame: pd.DataFrame, n: int = 5, distinct: bool = True) -> pd.DataFrame:
    """Return the ``n`` completed evaluations of lowest value, best first (ties by ``number``).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`to_dataframe` returned.
    n : int >= 1
        How many rows at most.
    distinct : bool
        List each configuration (the same parameter values) once, with its best evaluation.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer, or the frame is of a run with several objectives (no ``value``
        column; :func:`pareto_front_rows` lists its best evaluations).
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
    objectives (see :func:`objectives_of` for ``objectives``), one column per objective instead of the
    loss, named by :func:`objective_labels` (``error (min)``), holding the values as the loss function
    returned them.
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
    done = frame.loc[frame["state"].isin(_FINISHED)].sort_values("number", kind="stable")
    return int(done.duplicated(["island", *params]).sum()), int(done.duplicated(params).sum())


def status_counts(frame: pd.DataFrame) -> pd.Series:
    """Return the number of evaluations per ``state``: the finished states always, the others if present."""
    counts = frame["state"].value_counts()
    names = [*_FINISHED, *(s for s in _UNFINISHED if counts.get(s, 0))]
    return counts.reindex(names, fill_value=0).rename("evaluations")


def island_summary(frame: pd.DataFrame, objectives: Any = None) -> pd.DataFrame:
    """Return per birth island: evaluations, how many of each state, and the best completed value.

    With several objectives (see :func:`objectives_of` for ``objectives``), instead of ``best_value``:
    ``on_front``, how many rows of :func:`pareto_front_rows` were bred on the island, and ``best_<name>``
    per objective, its best completed value in its own direction (a maximized one's largest).
    """
    table = _island_counts(frame)
    goals = objectives_of(frame, objectives)
    if goals is None:
        complete = frame.loc[frame["state"] == "COMPLETE", ["island", "value"]]
        table["best_value"] = complete.groupby("island")["value"].min().reindex(table.index)
        return table
    return _island_front(frame, goals, pareto_front_rows(frame, goals), table)


def _island_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Return per birth island: evaluations and how many of each state."""
    pd = _pandas()
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


# ------------------------------------------------------------------------------------- several objectives

#: Reports list at most this many rows of the Pareto front by default.
FRONT_ROWS = 20


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
    (:func:`pareto_front_rows`; each objective's values as the loss function returned them, under its name
    and direction, e.g. ``error (min)``, sorted by the first objective, best first), then the hypervolume
    of the front so far after each tenth of the completed evaluations (:func:`hypervolume_history`) with
    its reference point stated: ``reference`` if given, else 10 % of each objective's range beyond its
    worst completed value (:func:`reference_point`). Per island, ``on_front`` and each objective's best value
    replace ``best_value`` (:func:`island_summary`).

    Parameters
    ----------
    frame : pandas.DataFrame
        What :func:`to_dataframe` returned.
    top : int >= 1, optional
        How many of the best distinct configurations to list (default 5); with several objectives, how many
        rows of the Pareto front at most (default :data:`FRONT_ROWS`, 20).
    title : str
        First line of the report.
    notes : sequence of str
        Lines to show under the title (e.g. the run's configuration).
    objectives : optional
        The run's objectives, for their names and directions (see :func:`objectives_of`).
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
    pd = _pandas()
    goals = objectives_of(frame, objectives)
    if goals is None:
        best_rows = best(frame, 5 if top is None else top)
    elif top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ValueError(f"top: expected a positive integer, got {top!r}")
    lines = [title, "=" * len(title), *notes]
    spans = session_spans(frame)
    finished = int(frame["state"].isin(_FINISHED).sum())
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

    lines += ["", "Evaluations by state"]
    lines += _indent(status_counts(frame).rename_axis(None).to_string())
    on_island, in_all = repeated(frame)
    lines.append(
        f"  {on_island} repeated a configuration evaluated before on their island ({in_all} in all islands)"
    )

    if goals is None:
        islands = island_summary(frame).reset_index()
    else:
        islands = _island_front(frame, goals, front, _island_counts(frame)).reset_index()
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


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """Return the frame's columns of metrics (``user_attrs_<name>`` holding numbers, not free-form data)."""
    return [c for c in frame.columns if c.startswith("user_attrs_") and frame[c].dtype.kind == "f"]


def interim_losses(individuals: Iterable[Individual]) -> pd.DataFrame:
    """Return the interim losses of the evaluations of a generator loss function, one row per step.

    A checkpoint keeps an evaluation's learning curve only when its worker ran a surrogate that records
    curves (:class:`~propulate.surrogate.StaticSurrogate`, :class:`~propulate.surrogate.LogLinearSurrogate`,
    :class:`~propulate.surrogate.DynamicSurrogate`: its ``surrogate_data["curve"]``); other evaluations have
    no rows. Copies made by migration carry their original's curve and are left out by joining on ``uid``
    with the frame of :func:`to_dataframe`.

    Parameters
    ----------
    individuals : iterable of Individual
        E.g. ``checkpoint.population``.

    Returns
    -------
    pandas.DataFrame
        Columns ``uid`` (int), ``step`` (int, 0 for the first interim loss) and ``loss`` (float).

    Raises
    ------
    ImportError
        If pandas is not installed.
    """
    pd = _pandas()
    uids: list[int] = []
    curves: list[Sequence[float]] = []
    for ind in individuals:
        data = ind.surrogate_data
        if isinstance(data, Mapping) and isinstance(data.get("curve"), Sequence) and data["curve"]:
            uids.append(ind.uid)
            curves.append(data["curve"])
    lengths = np.fromiter(map(len, curves), dtype=np.int64, count=len(curves))
    starts = np.cumsum(lengths) - lengths
    return pd.DataFrame(
        {
            "uid": np.repeat(np.array(uids, dtype=np.int64), lengths),
            "step": np.arange(int(lengths.sum())) - np.repeat(starts, lengths),
            "loss": np.array([value for curve in curves for value in curve], dtype=np.float64),
        }
    )


def _number(x: float) -> str:
    return f"{x:.6g}"


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]
