"""``Migrator``: the name Propulate 1.2.2 gives a worker's loop with real migration between islands."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpi4py import MPI

from .propagators.base import Propagator, SelectMin
from .propulator import Propulator

__all__ = ["Migrator"]


class Migrator(Propulator):
    """A :class:`Propulator` whose emigrants leave their island (real migration).

    Kept for scripts written for Propulate 1.2.2, which build a worker's loop from its parts; it takes 1.2.2's
    arguments in 1.2.2's order, and every keyword-only argument of :class:`Propulator` (``resume``,
    ``time_limit``, ...). :class:`propulate.Islands` builds one for ``pollination=False``. An emigrant is
    deactivated on its old island and, on arrival, joins the new one.

    Parameters
    ----------
    loss_fn, propagator, rng, island_idx, island_comm, propulate_comm, worker_sub_comm, generations
        See :class:`Propulator`.
    checkpoint_path, migration_prob, emigration_propagator, island_displs
        See :class:`Propulator`.
    migration_topology : {"hypercube", "complete", "ring"}, array_like of int, or None
        Checked by :func:`propulate.migration.check_topology`: a name, or an int array of shape
        ``(num_islands, num_islands)``. ``None`` is ``"hypercube"``; ``"complete"`` is Propulate 1.2.2's
        default, one individual to every other island.
    island_counts, surrogate_factory
        See :class:`Propulator`.
    **kwargs
        The keyword-only arguments of :class:`Propulator`, except ``pollination``.

    Raises
    ------
    TypeError
        If ``pollination`` is given: a migrator never pollinates (use :class:`propulate.Pollinator`).
    propulate.errors.LayoutError
        (a ``ValueError``) for an unknown ``migration_topology`` name or an array of the wrong shape or with
        negative entries.
    """

    def __init__(
        self,
        loss_fn: Callable[..., Any],
        propagator: Propagator,
        rng: random.Random | int | None = None,
        island_idx: int = 0,
        island_comm: MPI.Comm = MPI.COMM_WORLD,
        propulate_comm: MPI.Comm = MPI.COMM_WORLD,
        worker_sub_comm: MPI.Comm = MPI.COMM_SELF,
        generations: int = -1,
        checkpoint_path: str | Path = "./",
        migration_topology: Any = None,
        migration_prob: float = 0.0,
        emigration_propagator: type[Propagator] | Propagator = SelectMin,
        island_displs: Any = None,
        island_counts: Any = None,
        surrogate_factory: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if "pollination" in kwargs:
            raise TypeError(
                "pollination: a Migrator moves individuals; use propulate.Pollinator to send copies"
            )
        super().__init__(
            loss_fn,
            propagator,
            rng,
            island_idx,
            island_comm,
            propulate_comm,
            worker_sub_comm,
            generations,
            checkpoint_path,
            migration_topology,
            migration_prob,
            emigration_propagator,
            island_displs,
            island_counts,
            surrogate_factory,
            pollination=False,
            **kwargs,
        )
