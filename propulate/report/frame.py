"""The evaluations of a run as a pandas DataFrame, and CSV/JSON files of it.

Everything here works on a login node or in a notebook: it reads the checkpoint with
:func:`propulate.load_checkpoint` and never initializes MPI. pandas is an optional dependency
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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ..checkpoint import Checkpoint, load_checkpoint, make_uid, uid_origin
from ..errors import PropulateError
from ..individual import Individual, Status
from ..objectives import Objectives
from ..space import Kind, SearchSpace

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FINISHED",
    "STATES",
    "UNFINISHED",
    "NoCheckpointError",
    "checkpoint_dataframe",
    "epoch_seconds",
    "interim_losses",
    "load_dataframe",
    "metric_columns",
    "read_checkpoint",
    "require_pandas",
    "to_dataframe",
    "value_columns",
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

#: The states of finished evaluations, in the order the reports list them.
FINISHED = ("COMPLETE", "PRUNED", "FAIL")
#: The states of unfinished evaluations, listed after :data:`FINISHED` where present.
UNFINISHED = ("RUNNING", "WAITING")


class NoCheckpointError(PropulateError, FileNotFoundError):
    """A directory holds no checkpoint files."""


def require_pandas() -> Any:
    """Return the ``pandas`` module, imported on first use.

    Raises
    ------
    ImportError
        If pandas is not installed, naming the extra that installs it.
    """
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
        What :func:`propulate.load_checkpoint` reads.

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
    pd = require_pandas()
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
        columns.update(_objective_columns(kept, goals, has_value))
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


def _objective_columns(
    individuals: Sequence[Individual], goals: Objectives, has_value: np.ndarray
) -> dict[str, Any]:
    """Optuna's ``values_<i>`` columns: each objective as the loss function returned it, NaN without one."""
    values = np.full((len(individuals), len(goals)), np.nan)
    for row, ind in enumerate(individuals):
        if has_value[row] and ind.losses is not None and len(ind.losses) == len(goals):
            values[row] = goals.values(ind.losses)
    return {column: values[:, i] for i, column in enumerate(value_columns(goals))}


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


# ---------------------------------------------------------------------------------------------- columns


def value_columns(goals: Objectives) -> list[str]:
    """Return the frame's columns of the objectives, Optuna's names: ``values_0``, ``values_1``, ..."""
    return [f"values_{i}" for i in range(len(goals))]


def epoch_seconds(column: pd.Series) -> np.ndarray:
    """Return a column of UTC timestamps (``datetime_start``, ``datetime_complete``) as epoch seconds.

    Returns
    -------
    numpy.ndarray of float64
        Seconds since 1970-01-01 UTC; NaN for ``NaT`` (an evaluation that never finished).
    """
    pd = require_pandas()
    return (column - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """Return the frame's columns of metrics (``user_attrs_<name>`` holding numbers, not free-form data)."""
    return [c for c in frame.columns if c.startswith("user_attrs_") and frame[c].dtype.kind == "f"]


# ----------------------------------------------------------------------------------------- interim losses


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
    pd = require_pandas()
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
