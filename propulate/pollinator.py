"""``Pollinator``: the name Propulate 1.2.2 gives a worker's loop with pollination between islands."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpi4py import MPI

from .propagators.base import Propagator, SelectMax, SelectMin
from .propulator import Propulator

__all__ = ["Pollinator"]


class Pollinator(Propulator):
    """A :class:`Propulator` that sends copies of its emigrants (pollination).

    Kept for scripts written for Propulate 1.2.2, which build a worker's loop from its parts; it takes
    1.2.2's arguments in 1.2.2's order (``immigration_propagator`` before ``island_displs``; ``generations``
    defaults to 0 as there), and every keyword-only argument of :class:`Propulator`.
    :class:`propulate.Islands` builds one for ``pollination=True``. A copy stays active on its old island;
    on arrival it replaces an individual chosen by ``immigration_propagator`` (the worst by default), which
    is deactivated.

    Parameters
    ----------
    loss_fn, propagator, rng, island_idx, island_comm, propulate_comm, worker_sub_comm, generations
        See :class:`Propulator`.
    checkpoint_path, migration_prob, emigration_propagator
        See :class:`Propulator`.
    migration_topology : {"hypercube", "complete", "ring"}, array_like of int, or None
        Checked by :func:`propulate.migration.check_topology`: a name, or an int array of shape
        ``(num_islands, num_islands)``. ``None`` is ``"hypercube"``; ``"complete"`` is Propulate 1.2.2's
        default, one individual to every other island.
    immigration_propagator : Propagator class
        Selects the individuals that immigrants replace.
    island_displs, island_counts, surrogate_factory
        See :class:`Propulator`.
    **kwargs
        The keyword-only arguments of :class:`Propulator`, except ``pollination``.

    Raises
    ------
    TypeError
        If ``pollination`` is given: a pollinator always pollinates (use :class:`propulate.Migrator`).
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
        generations: int = 0,
        checkpoint_path: str | Path = "./",
        migration_topology: Any = None,
        migration_prob: float = 0.0,
        emigration_propagator: type[Propagator] | Propagator = SelectMin,
        immigration_propagator: type[Propagator] | Propagator = SelectMax,
        island_displs: Any = None,
        island_counts: Any = None,
        surrogate_factory: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if "pollination" in kwargs:
            raise TypeError(
                "pollination: a Pollinator sends copies; use propulate.Migrator to move individuals"
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
            immigration_propagator=immigration_propagator,
            pollination=True,
            **kwargs,
        )
