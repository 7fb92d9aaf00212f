"""Several objectives: how a loss function returns them, Pareto ranks, crowding distance and hypervolume.

A run with ``objectives`` (see :class:`Objectives`) minimizes a vector of losses instead of one number.
Its loss function returns, for ``M`` objectives, a sequence of ``M`` numbers (tuple, list, 1-D array or
tensor) in the order the run names them, or a mapping that holds each named objective (further numeric
entries are metrics, as with one objective). An objective to maximize (``{"accuracy": "maximize"}``) is
stored negated, so that internally every objective is minimized: :attr:`Individual.losses
<propulate.individual.Individual.losses>` holds the minimized values and :meth:`Objectives.values` turns
them back into the values as returned. :attr:`Individual.loss <propulate.individual.Individual.loss>` is
the first of them, which keeps everything that ranks individuals by one number (logs, surrogates, the
plain ``best``) defined; what a multi-objective run returns is its Pareto front (:func:`pareto_front`).

Pareto dominance (minimization): ``a`` dominates ``b`` when ``a_i <= b_i`` for every objective and
``a_i < b_i`` for at least one. The Pareto rank of a point is 0 when nothing dominates it, and ``r + 1``
when the points of ranks up to ``r`` removed, nothing dominates it (the non-dominated sorting of NSGA-II,
Deb, Pratap, Agarwal & Meyarivan, IEEE TEC 6(2), 2002, Sec. III-A). Ranks and the hypervolume are computed
by the ``moocore`` package (López-Ibáñez et al.), the crowding distance here (Deb et al. 2002, Sec. III-B).
No MPI in here. ``moocore`` is imported when first used (it costs every rank some 20 ms, and most runs have
one objective).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .individual import Individual, Status

__all__ = [
    "Objectives",
    "crowding_distance",
    "hypervolume",
    "pareto_front",
    "pareto_ranks",
]

_DIRECTIONS = ("minimize", "maximize")


class Objectives:
    """The objectives of a multi-objective run: how many, their names and directions.

    Parameters
    ----------
    names : sequence of str
        One name per objective, unique; ``values_0``, ``values_1``, ... when the run only gave a number.
    directions : sequence of {"minimize", "maximize"}
        One per objective.
    named : bool
        Whether the user named them: a mapping returned by the loss function is then read by these names.

    Use :meth:`of` to build one from the ``objectives`` argument of :class:`~propulate.Propulator`.
    """

    __slots__ = ("directions", "named", "names", "signs")

    def __init__(self, names: Sequence[str], directions: Sequence[str], named: bool) -> None:
        self.names = tuple(names)
        self.directions = tuple(directions)
        self.named = bool(named)
        self.signs = tuple(-1.0 if d == "maximize" else 1.0 for d in self.directions)

    @classmethod
    def of(cls, spec: Any) -> Objectives | None:
        """Return the objectives an ``objectives`` argument describes; ``None`` for a single loss.

        Parameters
        ----------
        spec : None, int, sequence of str, or mapping of str to {"minimize", "maximize"}
            ``None``: one loss, a number (the default). An int ``M >= 1``: ``M`` objectives, all minimized,
            returned as a sequence. Names: one objective each, minimized, returned as a sequence in this
            order or as a mapping holding each name. A mapping: names with their directions. A dict as
            returned by :meth:`describe` is taken as well.

        Raises
        ------
        ValueError
            If ``spec`` is none of these: a count below 1, an empty or repeated name, an unknown direction.
        """
        if spec is None or isinstance(spec, Objectives):
            return spec
        if isinstance(spec, Mapping) and set(spec) == {"names", "directions", "named"}:  # describe()'s form
            return (
                cls.of(dict(zip(spec["names"], spec["directions"], strict=True)))
                if spec["named"]
                else cls._count(len(spec["names"]), spec["directions"])
            )
        if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
            return cls._count(int(spec), ["minimize"] * max(int(spec), 0))
        if isinstance(spec, Mapping):
            names, directions = list(spec), [spec[name] for name in spec]
        elif isinstance(spec, Sequence) and not isinstance(spec, (str, bytes)):
            names, directions = list(spec), ["minimize"] * len(spec)
        else:
            raise ValueError(
                "objectives: expected None, a number of objectives, a sequence of names or a mapping of "
                f"names to 'minimize' / 'maximize', got {spec!r}"
            )
        if not names:
            raise ValueError("objectives: expected at least one objective, got none")
        bad = [name for name in names if not isinstance(name, str) or not name]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"objectives: expected distinct non-empty names (str), got {names}")
        wrong = [d for d in directions if d not in _DIRECTIONS]
        if wrong:
            raise ValueError(f"objectives: directions must be 'minimize' or 'maximize', got {wrong}")
        return cls(names, directions, named=True)

    @classmethod
    def _count(cls, count: int, directions: Sequence[str]) -> Objectives:
        if count < 1:
            raise ValueError(f"objectives: expected a number of objectives >= 1, got {count}")
        return cls([f"values_{i}" for i in range(count)], directions, named=False)

    def __len__(self) -> int:
        return len(self.names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Objectives) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash((self.names, self.directions, self.named))

    def __repr__(self) -> str:
        if not self.named and set(self.directions) == {"minimize"}:
            return f"Objectives({len(self)})"
        return f"Objectives({dict(zip(self.names, self.directions, strict=True))})"

    def describe(self) -> dict[str, Any]:
        """Return the objectives as JSON values (the checkpoint's configuration stores them)."""
        return {"names": list(self.names), "directions": list(self.directions), "named": self.named}

    def interpret(self, result: Any) -> tuple[tuple[float, ...], dict[str, float]]:
        """Turn what a loss function returned into ``(losses, metrics)``, the losses minimized.

        Raises
        ------
        TypeError
            If ``result`` is neither a sequence of numbers nor a mapping (the evaluation fails with this
            message).
        ValueError
            If it holds another number of objectives than the run has, or a mapping lacks a named one.
        """
        metrics: dict[str, float] = {}
        if isinstance(result, Mapping):
            if self.named and all(name in result for name in self.names):
                values: Any = [result[name] for name in self.names]
                rest = {k: v for k, v in result.items() if k not in self.names}
            elif "loss" in result:
                values = result["loss"]
                rest = {k: v for k, v in result.items() if k != "loss"}
            else:
                missing = [name for name in self.names if name not in result] if self.named else ["loss"]
                raise ValueError(
                    f"loss_fn returned a mapping without {missing}: keys {list(result)}; the run's "
                    f"objectives are {list(self.names)}"
                )
            metrics = {str(k): as_real(v, repr(k)) for k, v in rest.items()}
        else:
            values = result
        sequence = _sequence(values, len(self))
        if len(sequence) != len(self):
            raise ValueError(
                f"loss_fn returned {len(sequence)} objective value(s); the run has {len(self)} objectives "
                f"{list(self.names)} (the objectives argument)"
            )
        losses = tuple(
            sign * as_real(v, f"objective {name!r}")
            for sign, v, name in zip(self.signs, sequence, self.names, strict=True)
        )
        return losses, metrics

    def values(self, losses: Sequence[float]) -> tuple[float, ...]:
        """Return the objective values as the loss function returned them, from minimized ``losses``."""
        return tuple(sign * float(v) for sign, v in zip(self.signs, losses, strict=True))


def as_real(value: Any, what: str) -> float:
    """Return a number the loss function returned as a float; ``what`` names it in the error.

    Raises
    ------
    TypeError
        If ``value`` is neither a real number (not a bool) nor a numpy or torch scalar holding one.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        number = item()
        if isinstance(number, numbers.Real) and not isinstance(number, bool):
            return float(number)
    raise TypeError(f"loss_fn returned {type(value).__name__} for {what}; expected a real number")


def _sequence(values: Any, expected: int) -> list[Any]:
    """Return the objective values in ``values``: a sequence, a 1-D array or tensor, or one number."""
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        return [values]
    tolist = getattr(values, "tolist", None)  # numpy arrays and torch tensors
    if callable(tolist) and not isinstance(values, (str, bytes)):
        listed = tolist()
        return listed if isinstance(listed, list) else [listed]
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
        return list(values)
    raise TypeError(
        f"loss_fn returned {type(values).__name__}; with {expected} objectives it returns a sequence of "
        f"{expected} numbers or a mapping that holds them"
    )


# ------------------------------------------------------------------------------------- Pareto geometry


def _points(points: Any) -> np.ndarray:
    array = np.asarray(points, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"points: expected an array of shape (n, M), got shape {array.shape}")
    return array


def pareto_ranks(points: Any) -> np.ndarray:
    """Return the Pareto rank of every point (0 for the non-dominated ones), minimizing every objective.

    Parameters
    ----------
    points : array_like of shape (n, M)
        Objective values, one row per point; NaN counts as ``inf``.

    Returns
    -------
    numpy.ndarray of shape (n,), int
        Equal points share a rank. O(n log n) for M = 2 and 3 points ... O(M n^2) in general (moocore).
    """
    array = _points(points)
    if len(array) == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.isfinite(array).all():
        # moocore ranks three objectives wrongly with inf and crashes on -inf: the largest finite numbers
        # stand in for them (NaN as inf), which keeps every comparison between two points.
        big = np.finfo(np.float64).max
        array = np.nan_to_num(array, nan=big, posinf=big, neginf=-big)
    import moocore

    return np.asarray(moocore.pareto_rank(array), dtype=np.int64)


def crowding_distance(points: Any, fronts: Any = None) -> np.ndarray:
    """Return the crowding distance of every point within its front (Deb et al. 2002, Sec. III-B).

    For each objective the points of a front are sorted by it; the two extremes get ``inf``, every other
    point the gap between its two neighbours divided by the objective's range over the front, summed over
    the objectives. Larger is less crowded. Vectorized over all fronts at once: O(M n log n).

    Parameters
    ----------
    points : array_like of shape (n, M)
        Objective values, one row per point.
    fronts : array_like of shape (n,), optional
        The front of each point (e.g. its Pareto rank, :func:`pareto_ranks`); all points form one front if
        not given.

    Returns
    -------
    numpy.ndarray of shape (n,)
        ``inf`` for the extremes of a front and for every point of a front of one or two points.
    """
    array = _points(points)
    n = len(array)
    group = np.zeros(n, dtype=np.int64) if fronts is None else np.asarray(fronts, dtype=np.int64)
    distance = np.zeros(n)
    if n == 0:
        return distance
    for column in array.T:
        order = np.lexsort((column, group))  # by front, then by this objective
        values, groups = column[order], group[order]
        change = groups[1:] != groups[:-1]
        first, last = np.concatenate(([True], change)), np.concatenate((change, [True]))
        sizes = np.diff(np.append(np.flatnonzero(first), n))
        with np.errstate(invalid="ignore", over="ignore"):
            span = np.repeat(values[last] - values[first], sizes)
            gap = np.zeros(n)
            gap[1:-1] = values[2:] - values[:-2]
            usable = ~(first | last) & (span > 0) & np.isfinite(span)
            contribution = np.where(usable, gap / np.where(usable, span, 1.0), 0.0)
        contribution[first | last] = np.inf
        distance[order] += contribution
    return distance


def hypervolume(points: Any, reference: Sequence[float]) -> float:
    """Return the hypervolume that ``points`` dominate up to ``reference``, minimizing every objective.

    The Lebesgue measure of the union of the boxes ``[p, reference]`` (Zitzler & Thiele 1998); points that
    do not dominate the reference contribute nothing. Computed by ``moocore.hypervolume`` (exact; O(n log n)
    for 2 and 3 objectives).

    Parameters
    ----------
    points : array_like of shape (n, M)
        Objective values, one row per point.
    reference : sequence of M floats
        The reference point, worse than every point that should count in every objective.

    Raises
    ------
    ValueError
        If ``reference`` does not have one value per objective.
    """
    array = _points(points)
    ref = np.asarray(reference, dtype=np.float64)
    if ref.shape != (array.shape[1],):
        raise ValueError(
            f"reference: expected {array.shape[1]} values, one per objective, got {ref.tolist()}"
        )
    inside = array[np.all(array < ref, axis=1)]
    if len(inside) == 0:
        return 0.0
    if np.isinf(inside).any():  # a point at -inf in some objective: unbounded (moocore would crash on it)
        return math.inf
    import moocore

    return float(moocore.hypervolume(inside, ref=ref))


def pareto_front(individuals: Sequence[Individual]) -> list[Individual]:
    """Return the completed individuals that no other completed one dominates, distinct, in input order.

    Distinct: of individuals with equal parameters and equal losses (a migrant and its copies) the first
    counts. Individuals without :attr:`~propulate.individual.Individual.losses` use their loss as the only
    objective.
    """
    done = [ind for ind in individuals if ind.status is Status.COMPLETED]
    if not done:
        return []
    ranks = pareto_ranks([loss_vector(ind) for ind in done])
    front: list[Individual] = []
    seen: set[tuple[Any, ...]] = set()
    for ind, rank in zip(done, ranks, strict=True):
        if rank == 0:
            key = (ind.position.tobytes(), loss_vector(ind))
            if key not in seen:
                seen.add(key)
                front.append(ind)
    return front


def loss_vector(ind: Individual) -> tuple[float, ...]:
    """Return the minimized objective values of ``ind``: its ``losses``, or ``(loss,)`` with one loss."""
    return ind.losses if ind.losses is not None else (ind.loss,)
