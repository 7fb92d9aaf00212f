"""An individual: one candidate configuration with its loss and provenance. No MPI in here."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Iterator, Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Any

import numpy as np

from .space import SearchSpace

__all__ = ["Individual", "Status", "loss_order"]


class Status(IntEnum):
    """Where an individual stands with its evaluation."""

    #: Bred, not evaluated yet (or being evaluated).
    PENDING = 1
    #: Evaluated; ``loss`` holds the result.
    COMPLETED = 2
    #: The evaluation raised or returned no usable loss.
    FAILED = 3
    #: A surrogate stopped the evaluation early; ``loss`` is the last interim loss.
    PRUNED = 4
    #: The evaluation was cut short by the end of the job; it is evaluated again on resume.
    INTERRUPTED = 5


class Individual(Mapping[str, Any]):
    """One candidate of the search: parameter values, loss and where it came from.

    Mapping-like over the parameters: ``ind["lr"]``, ``ind["lr"] = v``, ``len``, ``iter``, ``keys``,
    ``values``, ``items`` and ``in`` always see the decoded, current values of ``position``.

    Keys that start with ``_`` hold free-form data instead, as in Propulate 1.2.2 (custom propagators and
    surrogates use them): ``ind["_origin"] = "mutation"`` stores any picklable value, ``ind["_origin"]``
    reads it, ``"_origin" in ind`` tells whether it is set and ``del ind["_origin"]`` removes it. Such an
    entry is never a parameter: ``len``, iteration, ``keys()``, ``values()``, ``items()``, :meth:`params`
    and :meth:`equals` see the parameters only (1.2.2's ``keys()`` listed both). It travels with the
    individual — messages to other workers and islands, :meth:`copy`, pickling, the checkpoint and the
    exported results — but a child bred from it starts without (:meth:`child`).

    Parameters
    ----------
    position : Mapping[str, Any] or numpy.ndarray
        The parameter values as a dict (``_``-prefixed entries among them are free-form data, see above), or
        an embedding of shape ``(n_slots,)`` (one slot per numeric parameter, one one-hot block per
        categorical parameter).
    limits : Mapping[str, tuple] or SearchSpace
        The search space (see :mod:`propulate.space`).
    velocity : numpy.ndarray, optional
        Velocity of shape ``(n_slots,)``, used by particle swarms only.
    generation : int
        The breeding worker's generation counter when the individual was bred; ``-1`` if not bred by a worker.
    rank : int
        Index of the breeding worker in its island; ``-1`` if unknown.

    Attributes
    ----------
    loss : float
        The value minimized; ``inf`` until evaluated. In a run with several objectives, the first of
        :attr:`losses`.
    losses : tuple of float or None
        In a run with several objectives (see :mod:`propulate.objectives`), one loss per objective, each
        minimized (an objective to maximize is stored negated); ``None`` in a run with one loss and until
        evaluated.
    status : Status
        Pending until evaluated, then completed (or failed, pruned, interrupted).
    metrics : dict[str, float]
        Further numbers the loss function returned besides the loss (e.g. accuracy).
    active : bool
        Whether the individual may be selected for breeding on its current island.
    island : int
        The island the individual was bred on (its birth island).
    current : int
        Index (in its current island) of the worker responsible for it when migrating.
    migration_steps : int
        How often the individual has moved between islands.
    migration_history : str
        The islands it visited, e.g. ``"0-1"``.
    evaltime : float
        Epoch time in seconds when its evaluation finished; ``inf`` before.
    evalperiod : float
        Wall-clock seconds its evaluation took.
    uid : int
        Identifier of this entry in its island's population, unique within a run; ``-1`` before it enters
        a population.
    steps : int
        How many interim losses a generator loss function yielded for it; 0 for a plain loss function.
    surrogate_data : object
        What the evaluating worker's surrogate learned from this evaluation (JSON-serializable, see
        :meth:`propulate.surrogate.Surrogate.data`); ``None`` without a surrogate.
    error : str or None
        Why its evaluation failed (status failed): the traceback of the loss function, its last
        :data:`ERROR_CHARS` characters (the error itself at the end); ``None`` otherwise. Travels to the
        island's other workers and into the checkpoint.
    extras : Mapping[str, object]
        The ``_``-prefixed entries (see above), by key; a read-only view (assigning a mapping replaces them
        all).
    mapping : dict[str, object]
        Propulate 1.2.2's view of the individual: the parameter values followed by the ``_``-prefixed
        entries, as a new dict (changing it changes nothing).

    Further attributes may be set (they are copied and pickled with the individual, not checkpointed).
    The attributes above live in ``__slots__``, so an individual costs about 650 bytes in memory with a
    10-parameter space, and pickles to a flat tuple (about 200 bytes plus the search space, once per
    message).

    Raises
    ------
    ValueError
        If ``position`` does not match the search space.
    KeyError
        For a key that is neither a parameter nor ``_``-prefixed, naming the parameters; for deleting a
        parameter.
    """

    # Fixed attributes in slots: an island stores one individual per evaluation. Further attributes set by
    # user code go to a dict created on first use, and travel with the individual.
    __slots__ = (
        "__dict__",
        "_extras",
        "_metrics",
        "active",
        "current",
        "error",
        "evalperiod",
        "evaltime",
        "generation",
        "island",
        "loss",
        "losses",
        "migration_history",
        "migration_steps",
        "position",
        "rank",
        "space",
        "status",
        "steps",
        "surrogate_data",
        "uid",
        "velocity",
    )

    # Mapping's __eq__ compares only the parameters; individuals are distinct objects (use equals()).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __init__(
        self,
        position: Mapping[str, Any] | np.ndarray,
        limits: Mapping[str, Any] | SearchSpace,
        velocity: np.ndarray | None = None,
        generation: int = -1,
        rank: int = -1,
    ) -> None:
        self.space = SearchSpace.of(limits)
        self._extras: dict[str, Any] | None = None
        if isinstance(position, Mapping):
            extras = {k: v for k, v in position.items() if isinstance(k, str) and k.startswith("_")}
            if extras:
                position = {k: v for k, v in position.items() if k not in extras}
                self._extras = extras
            self.position = self.space.encode(position)
        else:
            array = np.array(position, dtype=np.float64)
            if array.shape != (self.space.ndim,):
                raise ValueError(
                    f"position: expected shape ({self.space.ndim},) for this search space, got {array.shape}"
                )
            self.position = array
        self.velocity = None if velocity is None else np.array(velocity, dtype=np.float64)
        self.generation = generation
        self.rank = rank
        self.loss = math.inf
        self.losses: tuple[float, ...] | None = None
        self.status = Status.PENDING
        self._metrics: dict[str, float] | None = None
        self.active = True
        self.island = -1
        self.current = rank
        self.migration_steps = 0
        self.migration_history = ""
        self.evaltime = math.inf
        self.evalperiod = 0.0
        self.uid = -1
        self.steps = 0
        self.surrogate_data: Any = None
        self.error: str | None = None

    @property
    def metrics(self) -> dict[str, float]:
        """Further numbers the loss function returned besides the loss (e.g. accuracy)."""
        if self._metrics is None:
            # Created on first use: most individuals never carry metrics.
            self._metrics = {}
        return self._metrics

    @metrics.setter
    def metrics(self, value: dict[str, float]) -> None:
        self._metrics = value

    @property
    def extras(self) -> Mapping[str, Any]:
        """The ``_``-prefixed entries by key, read-only (set them with ``ind["_key"] = value``)."""
        return MappingProxyType(self._extras or {})

    @extras.setter
    def extras(self, entries: Mapping[str, Any] | None) -> None:
        unkeyed = [key for key in entries or {} if not (isinstance(key, str) and key.startswith("_"))]
        if unkeyed:
            raise KeyError(f"extras: keys must start with '_', got {unkeyed}")
        self._extras = dict(entries) if entries else None

    @property
    def mapping(self) -> dict[str, Any]:
        """The parameter values followed by the ``_``-prefixed entries, as a new dict (1.2.2's view)."""
        return {**self.params(), **(self._extras or {})}

    @property
    def limits(self) -> dict[str, Any]:
        """The search space as a dict (numeric ranges low-to-high)."""
        return self.space.limits

    def __getitem__(self, key: str) -> Any:
        p = self.space.index.get(key)
        if p is not None:
            return self.space.decode_one(self.position, p)
        if self._extras and key in self._extras:  # only ever '_' keys
            return self._extras[key]
        raise KeyError(self._unknown(key))

    def __setitem__(self, key: str, value: Any) -> None:
        p = self.space.index.get(key)
        if p is not None:
            self.space.encode_one(self.position, p, value)
        elif isinstance(key, str) and key.startswith("_"):
            if self._extras is None:
                self._extras = {}  # created on first use: most individuals never carry any
            self._extras[key] = value
        else:
            raise KeyError(self._unknown(key))

    def __delitem__(self, key: str) -> None:
        if key in self.space.index:
            raise KeyError(f"{key!r} is a parameter of the search space; only '_' entries can be deleted")
        if not (self._extras and key in self._extras):
            raise KeyError(self._unknown(key))
        del self._extras[key]
        if not self._extras:
            self._extras = None

    def _unknown(self, key: object) -> str:
        return (
            f"{key!r} is not a parameter of this search space {self.space.names}"
            + (" and not set on this individual" if isinstance(key, str) and key.startswith("_") else "")
            + " (keys starting with '_' hold free-form data)"
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.space.names)

    def __len__(self) -> int:
        return len(self.space.names)

    def __contains__(self, key: object) -> bool:
        return key in self.space.index or bool(self._extras and key in self._extras)

    def params(self) -> dict[str, Any]:
        """Return the parameter values as a plain dict."""
        return self.space.decode(self.position)

    def equals(self, other: Individual) -> bool:
        """Whether ``other`` has the same parameter values and the same loss and losses (NaN equals NaN)."""
        same_loss = _same(self.loss, other.loss)
        if self.losses is not None or other.losses is not None:
            mine, theirs = self.losses or (), other.losses or ()
            same_loss = same_loss and len(mine) == len(theirs) and all(map(_same, mine, theirs))
        return same_loss and self.params() == other.params()

    def child(self) -> Individual:
        """Return a fresh, unevaluated individual with a copy of this one's position (and velocity)."""
        child = _new()
        child.space = self.space
        child.position = self.position.copy()
        child.velocity = None if self.velocity is None else self.velocity.copy()
        child.generation = -1
        child.rank = -1
        child.loss = math.inf
        child.losses = None
        child.status = Status.PENDING
        child._metrics = None
        child.active = True
        child.island = -1
        child.current = -1
        child.migration_steps = 0
        child.migration_history = ""
        child.evaltime = math.inf
        child.evalperiod = 0.0
        child.uid = -1
        child.steps = 0
        child.surrogate_data = None
        child.error = None
        child._extras = None
        return child

    def copy(self) -> Individual:
        """Return a copy carrying everything, the loss and the provenance included."""
        twin = _restore(self.space, *self.packed())
        twin._extras = copy.deepcopy(self._extras)  # the values too: unpickled ones are new already
        return twin

    def packed(self) -> tuple[Any, ...]:
        """Everything but the search space, as plain values (the arrays as raw float64 bytes).

        What an island's workers send each other: the space is the run's and travels once per sender, so a
        message carries about 200 bytes per individual. :func:`unpack` rebuilds the individual.
        """
        return (
            self.position.tobytes(),
            None if self.velocity is None else self.velocity.tobytes(),
            self.generation,
            self.rank,
            self.loss,
            int(self.status),
            self._metrics or None,
            self.active,
            self.island,
            self.current,
            self.migration_steps,
            self.migration_history,
            self.evaltime,
            self.evalperiod,
            self.uid,
            self.steps,
            self.surrogate_data,
            self.error,
            self._extras or None,
            self.__dict__ or None,
            self.losses,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # A flat tuple of plain values: an individual is pickled once per message and unpickled by every
        # receiver, so this is what each message costs.
        return (_restore, (self.space, *self.packed()))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in self.items())
        extra = "".join(f", {k}={_fmt(v)}" for k, v in self.metrics.items())
        loss = _fmt(self.loss) if self.losses is None else "(" + ", ".join(map(_fmt, self.losses)) + ")"
        return (
            f"Individual({params} | loss{'es' if self.losses is not None else ''}={loss}{extra}, "
            f"island={self.island}, "
            f"worker={self.rank}, generation={self.generation}, active={self.active})"
        )


_new = functools.partial(Individual.__new__, Individual)

# Status by value without going through the enum's lookup.
_STATUS = {int(status): status for status in Status}


def _array(values: np.ndarray | bytes) -> np.ndarray:
    """Return an independent float64 array of ``values`` (an array, or its raw bytes from a pickle)."""
    if isinstance(values, np.ndarray):
        return values.copy()
    return np.frombuffer(values, dtype=np.float64).copy()


def _restore(
    space: SearchSpace,
    position: np.ndarray | bytes,
    velocity: np.ndarray | bytes | None,
    generation: int,
    rank: int,
    loss: float,
    status: int,
    metrics: dict[str, float] | None,
    active: bool,
    island: int,
    current: int,
    migration_steps: int,
    migration_history: str,
    evaltime: float,
    evalperiod: float,
    uid: int,
    steps: int,
    surrogate_data: Any,
    error: str | None = None,
    extras: dict[str, Any] | None = None,
    attributes: dict[str, Any] | None = None,
    losses: tuple[float, ...] | None = None,
) -> Individual:
    """Rebuild an individual from its space and :meth:`Individual.packed` (copy, unpickling, messages)."""
    ind = _new()
    ind.space = space
    ind.position = _array(position)
    ind.velocity = None if velocity is None else _array(velocity)
    ind.generation = generation
    ind.rank = rank
    ind.loss = loss
    ind.losses = None if losses is None else tuple(losses)
    ind.status = _STATUS[status]
    ind._metrics = None if metrics is None else dict(metrics)
    ind.active = active
    ind.island = island
    ind.current = current
    ind.migration_steps = migration_steps
    ind.migration_history = migration_history
    ind.evaltime = evaltime
    ind.evalperiod = evalperiod
    ind.uid = uid
    ind.steps = steps
    ind.surrogate_data = surrogate_data
    ind.error = error
    ind._extras = None if extras is None else dict(extras)  # values fresh from unpickling; copy() deep-copies
    if attributes:
        ind.__dict__.update(attributes)
    return ind


#: The most characters of a failure's traceback an individual keeps (:attr:`Individual.error`).
ERROR_CHARS = 2000

#: ``unpack(space, *ind.packed())`` rebuilds ``ind`` in ``space`` (one call per received individual, so
#: the function itself, not a wrapper around it).
unpack = _restore


def loss_order(ind: Individual) -> float:
    """Sort key by loss in which NaN counts as ``inf``: a NaN loss never ranks before a real one."""
    return math.inf if math.isnan(ind.loss) else ind.loss


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)
