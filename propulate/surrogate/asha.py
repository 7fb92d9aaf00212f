"""Asynchronous successive halving (ASHA), optionally with Hyperband brackets, as a surrogate."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..validation import check_int
from .base import Surrogate

if TYPE_CHECKING:
    from ..individual import Individual

__all__ = ["SuccessiveHalving"]


class SuccessiveHalving(Surrogate):
    """Cancel a run that is not among the best ``1 / η`` of the results recorded at a rung.

    The resource of a run is the number of interim losses it has reported (e.g. epochs). A run of bracket
    ``s`` meets its rungs ``k = 0, 1, ...`` at the resources ``r_k = min_resource · η^(s + k)`` below
    ``max_resource``. When it reaches ``r_k``, its interim loss ``ℓ`` joins the records of rung ``k`` and,
    with ``n`` the number of results recorded there (its own included),

    - the run continues if ``n < η``;
    - otherwise it continues if and only if fewer than ``⌊n / η⌋`` recorded results are strictly lower
      than ``ℓ``: it is among the best ``⌊n / η⌋`` (ties count in its favour); else it is cancelled.

    This is the promotion test of ASHA (Li et al. 2020, Algorithm 2: a configuration of rung ``k`` is
    promotable if it is in ``top_k(rung k, ⌊|rung k| / η⌋)``) turned into the stop-or-continue decision
    that early stopping makes: it is taken once, when the run reaches the rung, and a run that is not
    promoted then is stopped instead of waiting for a later promotion. Unlike Algorithm 2, where nothing is
    promotable while ``⌊n / η⌋ = 0``, a rung holding fewer than ``η`` results lets runs pass, so that the
    first runs of a search are not all stopped at the first rung. No decision is taken at or beyond
    ``max_resource``: a run that reaches it is never cancelled, and the loss function should end there (it
    is the maximum resource ``R`` of the papers; the surrogate cannot end a run other than as pruned). A
    NaN or infinite interim loss always cancels (the training diverged) and is not recorded.

    With ``brackets = b > 1``, runs are spread over the first ``b`` brackets of Hyperband (Li et al. 2018),
    ``s = 0, ..., b - 1`` with ``b <= s_max + 1`` and ``s_max = ⌊log_η(max_resource / min_resource)⌋``;
    bracket ``s`` first stops runs at ``min_resource · η^s``, so higher brackets stop less aggressively.
    Each bracket keeps rung records of its own. A run's bracket is ``ind.generation mod b``: every worker
    loops through the brackets, as asynchronous Hyperband loops through brackets of ASHA.

    The rung records are shared by the island's workers as runs reach their rungs, as in ASHA, where a
    configuration enters a rung's records when it gets there: after each rung result :meth:`interim_data`
    hands the run's record so far to the worker, which sends it to its island's peers at once (with many
    workers, records that waited for the end of each run would lag by a whole evaluation: simulated with 16
    workers, that trained 41 % of the resource instead of 15 %, ``benchmarks/asha_curves.py``). :meth:`data`
    is the finished run's bracket and its losses at the rungs it reached, stored with the individual, and
    :meth:`merge` adds either to this worker's records, keyed by the individual's ``uid``: a record merged
    twice counts once, in any order, and a surrogate rebuilt from the checkpoint has the records of every
    finished run. Immigrants bring their record to the island they reach, keyed by the uid of the evaluation
    itself, so a copy that comes back home counts once. A run's own results count in its decisions at once. A
    run that fails after a rung leaves that rung result with the workers that received it, but not in the
    checkpoint; an interrupted run shares its rung results again when it finishes after the resume. The
    worker's root decides and the worker's other ranks stop with it.

    Parameters
    ----------
    min_resource : int >= 1
        ``r_min``, the resource (number of interim losses) of the first rung of bracket 0.
    reduction_factor : int >= 2
        ``η``: the share of a rung's runs that continue is ``1 / η``, and rungs are ``η`` times apart.
    max_resource : int or None
        ``R``, the resource of a complete run, which must exceed ``min_resource``; no decisions are taken at
        or beyond it. ``None`` places rungs without end (a run is judged for as long as it reports losses).
    brackets : int >= 1
        The number of Hyperband brackets; more than 1 needs ``max_resource``, and at most ``s_max + 1``.

    Raises
    ------
    ValueError
        If an argument is out of its range, or ``brackets > 1`` without ``max_resource``.

    References
    ----------
    L. Li, K. Jamieson, A. Rostamizadeh, E. Gonina, J. Ben-tzur, M. Hardt, B. Recht, A. Talwalkar, "A System
    for Massively Parallel Hyperparameter Tuning", Proceedings of MLSys 2020 (ASHA, Algorithm 2).

    L. Li, K. Jamieson, G. DeSalvo, A. Rostamizadeh, A. Talwalkar, "Hyperband: A Novel Bandit-Based Approach
    to Hyperparameter Optimization", Journal of Machine Learning Research 18(185), 2018.
    """

    def __init__(
        self,
        min_resource: int = 1,
        reduction_factor: int = 3,
        max_resource: int | None = None,
        brackets: int = 1,
    ) -> None:
        self.min_resource = check_int("min_resource", min_resource, 1)
        self.reduction_factor = check_int("reduction_factor", reduction_factor, 2)
        self.max_resource = None
        if max_resource is not None:
            self.max_resource = check_int(
                "max_resource",
                max_resource,
                self.min_resource + 1,
                f"None or an int > min_resource ({min_resource})",
            )
        self.brackets = check_int("brackets", brackets, 1)
        if self.brackets > 1:
            if self.max_resource is None:
                raise ValueError(f"brackets: {brackets} brackets need a max_resource, got None")
            if self.brackets > self.s_max + 1:
                raise ValueError(
                    f"brackets: expected an int in [1, s_max + 1 = {self.s_max + 1}] for max_resource "
                    f"{max_resource}, min_resource {min_resource}, reduction_factor {reduction_factor}; "
                    f"got {brackets}"
                )
        # Per bracket, per rung: the result of each run (by key) recorded there.
        self._rungs: dict[int, list[dict[str, float]]] = {}
        self._key = ""
        self._bracket = 0
        self._losses: list[float] = []  # the current run's losses at its rungs
        self._steps = 0  # interim losses of the current run so far
        self._shared = 0  # rung results of the current run already handed out by interim_data()

    @property
    def s_max(self) -> int:
        """``⌊log_η(max_resource / min_resource)⌋``: the highest Hyperband bracket (0 without a maximum)."""
        if self.max_resource is None:
            return 0
        s = 0
        while self.min_resource * self.reduction_factor ** (s + 1) <= self.max_resource:
            s += 1
        return s

    def bracket_of(self, ind: Individual) -> int:
        """Return the bracket ``s`` of a run of ``ind``: ``ind.generation mod brackets``."""
        return ind.generation % self.brackets

    def rung_resource(self, bracket: int, rung: int) -> int:
        """Return ``min_resource · η^(bracket + rung)``, the resource of rung ``rung`` of ``bracket``."""
        return self.min_resource * self.reduction_factor ** (bracket + rung)

    def records(self) -> dict[int, list[dict[str, float]]]:
        """Return a copy of the rung records: per bracket, per rung, the loss of each run by key."""
        return {s: [dict(rung) for rung in rungs] for s, rungs in sorted(self._rungs.items())}

    def start_run(self, ind: Individual) -> None:
        """Begin the run of ``ind``; a previous run whose :meth:`data` was not taken leaves no record."""
        # Individuals not made by a Propulator have no uid (-1); their rank and generation tell them apart.
        self._key = str(ind.uid) if ind.uid >= 0 else f"r{ind.rank}g{ind.generation}"
        self._bracket = self.bracket_of(ind)
        self._losses = []
        self._steps = 0
        self._shared = 0

    def replay(self, loss: float) -> None:
        """Take in an interim loss an earlier attempt of this run reported; its rung results were shared."""
        self.cancel(loss)
        self._shared = len(self._losses)

    def interim_data(self) -> dict[str, Any] | None:
        """Return the current run's record as :meth:`data` does, once it reached a rung it had not shared.

        So the island's other workers judge their runs against this run's rung result at once, as in ASHA,
        where a configuration is recorded in a rung when it reaches it, not when its training ends.
        """
        if len(self._losses) == self._shared:
            return None
        self._shared = len(self._losses)
        return {"key": self._key, "bracket": self._bracket, "losses": list(self._losses)}

    def cancel(self, loss: float) -> bool:  # noqa: D102
        self._steps += 1
        if not math.isfinite(loss):
            return True
        rung = len(self._losses)
        resource = self.rung_resource(self._bracket, rung)
        if self._steps != resource or (self.max_resource is not None and resource >= self.max_resource):
            return False
        self._losses.append(float(loss))
        others = [value for key, value in self.recorded(self._bracket, rung).items() if key != self._key]
        n = len(others) + 1
        if n < self.reduction_factor:
            return False
        return sum(value < loss for value in others) >= n // self.reduction_factor

    def data(self) -> dict[str, Any] | None:
        """Return the latest run, ``{"key": str, "bracket": int, "losses": [loss at rung 0, ...]}``.

        ``None`` if it reached no rung. Also enters the run into this worker's own records.
        """
        if not self._losses:
            return None
        record = {"key": self._key, "bracket": self._bracket, "losses": list(self._losses)}
        self.merge(record)
        return record

    def merge(self, data: Any) -> None:
        """Add a run's results from :meth:`data` to the rung records (``None`` is ignored).

        Raises
        ------
        ValueError
            If ``data`` is not such a record.
        """
        if data is None:
            return
        try:
            if not isinstance(data, Mapping):
                raise TypeError
            key = str(data["key"])
            bracket = int(data["bracket"])
            losses = [float(x) for x in data["losses"]]
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"data: expected a dict with 'key', 'bracket' and 'losses' as made by data(), got {data!r}"
            ) from None
        for rung, loss in enumerate(losses):
            recorded = self._rung(bracket, rung)
            # A run is recorded once; should two records of one key disagree, the lower loss is kept
            # whatever the order of merging.
            recorded[key] = min(loss, recorded.get(key, math.inf))

    def recorded(self, bracket: int, rung: int) -> Mapping[str, float]:
        """Return the results recorded at rung ``rung`` of ``bracket`` (a read-only view), by run key."""
        rungs = self._rungs.get(bracket, [])
        return MappingProxyType(rungs[rung] if rung < len(rungs) else {})

    def _rung(self, bracket: int, rung: int) -> dict[str, float]:
        rungs = self._rungs.setdefault(bracket, [])
        while len(rungs) <= rung:
            rungs.append({})
        return rungs[rung]
