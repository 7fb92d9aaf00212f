"""Successive halving under MPI: known synthetic learning curves, decisions checked across the island.

The loss of an individual with parameters ``(final, start, a)`` is the curve
``final + (start - final) * (t + 1) ** -a`` over epochs ``t = 0 .. EPOCHS - 1`` (curves of different ``a``
cross). Each epoch starts with an all-reduce over the worker's communicator, as a DDP epoch would: ranks of
one worker that disagreed about stopping would hang. Only the worker's first rank yields the real value.

Every worker's surrogate logs its rung decisions. After the run, rank 0 prints one ``RESULT`` line with,
for every island and for all of them together: the evaluation counts; whether every rank of a worker left
each evaluation at the same epoch; whether the workers of the island hold the same population and the same
rung records, equal to records rebuilt from the surrogate data of every individual of the island's
population; whether every worker's view of an individual (status, steps, data) agrees with the others' and
with the decision its evaluator logged; whether each decision used only records that every worker of its
island holds in the end, with the same values; and a digest of the records (equal after a resume).

With ``--num-islands`` above 1 and ``--migration-prob`` above 0 individuals travel between islands
(``--pollination`` sends copies): an immigrant's surrogate data is merged into the records of the island
it reaches, so each island's records are those of its own evaluations and of its immigrants. The result
also says per island how many immigrants arrived and how many recorded runs were evaluated elsewhere,
whether every immigrant carries the status, steps and data its evaluation had on its home island, and
whether the islands' records share no run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
from typing import Any

from mpi4py import MPI

from propulate import Islands, Status
from propulate.surrogate import SuccessiveHalving
from propulate.utils import get_default_propagator

EPOCHS = 9
world = MPI.COMM_WORLD
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=10)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--eta", type=int, default=3)
parser.add_argument("--brackets", type=int, default=1)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--migration-prob", type=float, default=0.0)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--relay-radix", type=int, default=0, help="island relay tree radix (0: default)")
args = parser.parse_args()
if args.relay_radix:  # a small radix relays news over several hops even on a few ranks
    from propulate.mpi import dissemination

    dissemination.RADIX = args.relay_radix

left_at: list[tuple[float, int]] = []  # per evaluation this rank took part in: (final, epochs run)


def curve(params: Any, epoch: int) -> float:
    return params["final"] + (params["start"] - params["final"]) * (epoch + 1) ** -params["a"]


def loss(params, comm=MPI.COMM_SELF):
    left_at.append((params["final"], 0))
    for epoch in range(EPOCHS):
        comm.allreduce(epoch)
        left_at[-1] = (params["final"], epoch + 1)
        yield curve(params, epoch) if comm.rank == 0 else 1e9


class LoggingHalving(SuccessiveHalving):
    """Successive halving that logs, for each rung decision, what it knew and what it decided."""

    def __init__(self) -> None:
        super().__init__(
            min_resource=1, reduction_factor=args.eta, max_resource=EPOCHS, brackets=args.brackets
        )
        self.log: list[dict[str, Any]] = []

    def cancel(self, loss: float) -> bool:
        rung = len(self._losses)
        known = {k: v for k, v in self.recorded(self._bracket, rung).items() if k != self._key}
        stop = super().cancel(loss)
        if len(self._losses) > rung:  # it reached a rung and was judged there
            self.log.append(
                {"key": self._key, "bracket": self._bracket, "rung": rung, "known": known, "stop": stop}
            )
        return stop


limits = {"final": (0.0, 1.0), "start": (1.0, 3.0), "a": (0.2, 2.0)}
rng = random.Random(7 + world.rank)
islands = Islands(
    loss,
    get_default_propagator(4, limits, rng=rng),
    rng,
    generations=args.generations,
    checkpoint_path=args.checkpoint,
    num_islands=args.num_islands,
    migration_probability=args.migration_prob,
    pollination=args.pollination,
    ranks_per_worker=args.ranks_per_worker,
    surrogate_factory=LoggingHalving,
)
islands.propulate(debug=0)
propulator = islands.propulator

# Every rank of a worker took part in the same evaluations and left each at the same epoch.
worker_left = propulator.worker_sub_comm.allgather(left_at)
same_epochs = all(other == worker_left[0] for other in worker_left)

root = propulator.worker_sub_comm.rank == 0
report = None
if root:
    population = propulator.population
    surrogate = propulator.surrogate
    assert isinstance(surrogate, LoggingHalving)
    island = propulator.island_comm
    mine = [ind for ind in population if ind.rank == island.rank and ind.migration_steps == 0]
    rebuilt = SuccessiveHalving(1, args.eta, EPOCHS, args.brackets)
    for ind in population:
        rebuilt.merge(ind.surrogate_data)
    records = json.dumps(surrogate.records(), sort_keys=True)
    recorded_keys = {key for rungs in surrogate.records().values() for rung in rungs for key in rung}
    # Runs evaluated on this island, whether or not they left it since, or came back.
    evaluated_here = {str(ind.uid) for ind in population if ind.migration_steps == 0}
    problems = []
    for ind in mine:
        if ind.status is Status.PRUNED:
            bracket = surrogate.bracket_of(ind)
            rungs = {surrogate.rung_resource(bracket, k) for k in range(EPOCHS)}
            if ind.steps not in rungs or not math.isclose(ind.loss, curve(ind, ind.steps - 1)):
                problems.append(f"pruned off a rung: {ind.params()} steps {ind.steps} loss {ind.loss}")
        elif ind.status is not Status.COMPLETED or ind.steps != EPOCHS:
            problems.append(f"{ind.status.name} {ind.params()} steps {ind.steps}")
    report = {
        "island": propulator.island_idx,
        "evaluated": len(mine),
        "epochs_here": sum(ind.steps for ind in mine),
        "epochs_run": sum(epochs for _, epochs in left_at),
        "status": {s.name: sum(ind.status is s for ind in mine) for s in Status},
        "problems": problems,
        "records": records,
        "recorded_keys": sorted(recorded_keys),
        "foreign_records": len(recorded_keys - evaluated_here),
        "rebuilt_equal": json.dumps(rebuilt.records(), sort_keys=True) == records,
        "views": {str(ind.uid): [ind.status.name, ind.steps, ind.surrogate_data] for ind in population},
        # Where each immigrant was evaluated, and what it carries.
        "immigrants": [
            [ind.island, ind.status.name, ind.steps, ind.surrogate_data]
            for ind in population
            if ind.migration_steps > 0
        ],
        "log": surrogate.log,
    }
reports = world.gather((report, same_epochs), root=0)


def check_island(roots: list[dict[str, Any]]) -> dict[str, Any]:
    """Summarize the reports of one island's worker roots: what they hold in common, and whether it is."""
    views: dict[str, list[Any]] = {}
    for r in roots:
        for uid, view in r["views"].items():
            views.setdefault(uid, []).append(view)
    final = json.loads(roots[0]["records"])
    # Every worker holds every individual of the island, and sees it alike.
    decisions_agree = all(len(vs) == len(roots) and all(v == vs[0] for v in vs) for vs in views.values())
    logged_ok = True
    for r in roots:
        for entry in r["log"]:
            status, _, data = views[entry["key"]][0]
            rung = final[str(entry["bracket"])][entry["rung"]]
            # What it knew is in everyone's final records; its decision is the individual's fate.
            logged_ok &= all(rung.get(k) == v for k, v in entry["known"].items())
            logged_ok &= entry["key"] in rung and len(data["losses"]) > entry["rung"]
            if entry["stop"]:
                logged_ok &= status == "PRUNED" and len(data["losses"]) == entry["rung"] + 1
    return {
        "island": roots[0]["island"],
        "workers": len(roots),
        "evaluations": sum(r["evaluated"] for r in roots),
        "status": {s.name: sum(r["status"][s.name] for r in roots) for s in Status},
        "records_equal": len({r["records"] for r in roots}) == 1,
        "rebuilt_equal": all(r["rebuilt_equal"] for r in roots),
        "decisions_agree": decisions_agree,
        "logged_decisions_consistent": bool(logged_ok),
        "decisions": sum(len(r["log"]) for r in roots),
        "immigrants": len(roots[0]["immigrants"]),
        "foreign_records": roots[0]["foreign_records"],
        "views": {uid: vs[0] for uid, vs in views.items()},
    }


if world.rank == 0:
    assert reports is not None
    roots = [r for r, _ in reports if r is not None]
    by_island: dict[int, list[dict[str, Any]]] = {}
    for r in roots:
        by_island.setdefault(r["island"], []).append(r)
    summaries = [check_island(by_island[i]) for i in sorted(by_island)]
    # An immigrant's view (status, steps, data) is that of its evaluation on its home island: its data's key
    # is the uid it had there. A run that reached no rung has no data to find it by.
    views_of = {summary["island"]: summary.pop("views") for summary in summaries}
    arrived = [immigrant for r in roots for immigrant in r["immigrants"]]
    immigrants_carry_data = all(
        views_of[home].get(data["key"]) == [status, steps, data]
        for home, status, steps, data in arrived
        if data is not None
    )
    keys_of = [set(by_island[summary["island"]][0]["recorded_keys"]) for summary in summaries]
    result = {
        "workers": len(roots),
        "evaluations": sum(summary["evaluations"] for summary in summaries),
        "status": {s.name: sum(summary["status"][s.name] for summary in summaries) for s in Status},
        "problems": [p for r in roots for p in r["problems"]],
        "same_epochs_in_worker": all(same for _, same in reports),
        "epochs_counted": all(r["epochs_here"] == r["epochs_run"] for r in roots),
        "records_equal": all(summary["records_equal"] for summary in summaries),
        "rebuilt_equal": all(summary["rebuilt_equal"] for summary in summaries),
        "decisions_agree": all(summary["decisions_agree"] for summary in summaries),
        "logged_decisions_consistent": all(summary["logged_decisions_consistent"] for summary in summaries),
        "decisions": sum(summary["decisions"] for summary in summaries),
        "immigrants_carry_data": immigrants_carry_data,
        "immigrants_without_data": sum(data is None for *_, data in arrived),
        "records_disjoint": sum(map(len, keys_of)) == len(set().union(*keys_of)),
        "islands": summaries,
        "records_digest": hashlib.sha256(
            json.dumps([by_island[i][0]["records"] for i in sorted(by_island)]).encode()
        ).hexdigest(),
    }
    print("RESULT " + json.dumps(result), flush=True)
