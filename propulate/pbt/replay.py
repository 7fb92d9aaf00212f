"""Replay: train one network from scratch with the schedule that population-based training found.

Ray Tune's ``PopulationBasedTrainingReplay`` does the same for a Ray trial.

The schedule is a list of :class:`~propulate.pbt.lineage.Segment` (:func:`~propulate.pbt.lineage.schedule`
reads it from a run's individuals, also from a checkpoint on a login node). :func:`replay` calls the
population's own loss function once per segment, in one process and without MPI, with the segment's
configuration; the loss function continues from the state it committed in the previous segment
(:attr:`propulate.EvaluationCheckpoint.latest`), exactly as in the run, and is ended after the segment's
steps. Where a member of the run copied another's state, the replay simply goes on training its own.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from ..checkpoint.evaluations import EvaluationFolders, Resume, states
from ..validation import check_int
from .lineage import Segment

__all__ = ["replay"]


def replay(
    loss_fn: Callable[[dict[str, Any]], Generator[Any, None, None]],
    segments: Sequence[Segment],
    directory: str | Path | None = None,
) -> list[Any]:
    """Train one network with the schedule ``segments`` from scratch; return every interim loss it yielded.

    Parameters
    ----------
    loss_fn : callable
        The run's generator loss function, called as ``loss_fn(params)`` with each segment's configuration
        (a dict); it yields one interim loss per step and saves its state into
        :func:`propulate.evaluation_checkpoint`'s ``path`` before each.
    segments : sequence of Segment
        The schedule: each trains for ``until - start`` steps, one after the other.
    directory : str or pathlib.Path, optional
        Where the state is kept between segments (an ``evaluations`` folder is made in it); a temporary
        directory, removed at the end, if not given.

    Returns
    -------
    list
        The interim losses (or mappings with a ``"loss"``), one per step, in order.

    Raises
    ------
    ValueError
        If a segment trains for no step.
    """
    for k, segment in enumerate(segments):
        check_int(f"segments[{k}] steps", segment.until - segment.start, 1)
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="propulate-replay-") as temporary:
            return _replay(loss_fn, segments, Path(temporary))
    return _replay(loss_fn, segments, Path(directory))


def _replay(
    loss_fn: Callable[..., Generator[Any, None, None]], segments: Sequence[Segment], directory: Path
) -> list[Any]:
    folders = EvaluationFolders(directory, root=True)
    losses: list[Any] = []
    resume: Resume | None = None
    for segment in segments:
        if resume is not None:
            folders.discard(0)  # what the last segment saved after its last commit
        folders.begin(0, resume, lambda: None)
        stream = loss_fn(dict(segment.params))
        try:
            for _ in range(segment.until - segment.start):
                losses.append(next(stream))
                folders.commit(len(losses))
        finally:
            stream.close()
            folders.end()
        latest = states(folders.folder(0))
        resume = Resume([], latest[-1][0], latest[-1][2]) if latest else None
    return losses
