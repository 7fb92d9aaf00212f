"""A checkpointed island run over every parameter type, checked collectively (``test_parameter_types.py``).

The search space holds each kind of ``propulate.Float``, ``Integer`` and ``Categorical`` beside 1.2.2
tuples, among them ``Categorical((True, False, None, 16, 2.5, "a"))``; the loss has its optimum 0 at
``OPTIMUM``. Every rank checks, and rank 0 reports through ``_verdict``:

- every value the loss function received, and every individual of every rank's population, is of its
  declared type and range (values travel between ranks as embeddings: they have to decode as declared);
- ``best``, ``best_params``, ``best_loss`` and ``top(5)`` are identical on every rank, sub-ranks of multi-rank
  workers included; ``top(5)`` is sorted, distinct and starts with ``best``;
- ``best_loss`` is the loss of ``best_params``, the minimum over the union of all ranks' populations, and
  the minimum of the checkpoint's frame (``load_dataframe``), whose rows also decode as declared;
- with ``--at-most``, a bound from an earlier session resumed here: ``best_loss`` does not exceed it.

Rank 0 prints ``RESULT {json}``: the best loss, the number of evaluations and sessions in the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mpi4py import MPI

from propulate import Categorical, Float, Integer, Islands
from propulate.report import load_dataframe
from propulate.utils import get_default_propagator, get_tpe_propagator

sys.path.insert(0, str(Path(__file__).parent))
from _verdict import verdict

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=20)
parser.add_argument("--num-islands", type=int, default=1)
parser.add_argument("--ranks-per-worker", type=int, default=1)
parser.add_argument("--pollination", action="store_true")
parser.add_argument("--at-most", type=float, default=math.inf, help="best loss of the session resumed")
parser.add_argument("--propagator", choices=("default", "tpe"), default="default")
args = parser.parse_args()

LIMITS: dict[str, Any] = {
    "lr": Float(1e-5, 1e-1, log=True),
    "x": (-2.0, 2.0),
    "dropout": Float(0.0, 0.5, step=0.1),
    "width": Integer(1, 1024, log=True),
    "layers": (1, 8),
    "batch": Integer(8, 64, step=8),
    "act": ("relu", "tanh", "gelu"),
    "flag": Categorical((True, False, None, 16, 2.5, "a")),
}
DECLARED: dict[str, Float | Integer | Categorical] = {
    **LIMITS,
    "x": Float(-2.0, 2.0),
    "layers": Integer(1, 8),
    "act": Categorical(("relu", "tanh", "gelu")),
}
OPTIMUM = {
    "lr": 1e-3,
    "x": 0.0,
    "dropout": 0.0,
    "width": 64,
    "layers": 3,
    "batch": 32,
    "act": "tanh",
    "flag": True,
}
# By type and value: 16 and 2.5 cost more than True, and 1 (True's equal in Python) is not a choice.
FLAG_COST = {
    (bool, True): 0.0,
    (bool, False): 1.0,
    (type(None), None): 2.0,
    (int, 16): 3.0,
    (float, 2.5): 4.0,
}
FLAG_COST[(str, "a")] = 5.0

world = MPI.COMM_WORLD
failures: list[str] = []


def typed(params: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """Parameters with the names of their types, comparable and JSON-friendly (``True`` is not ``1``)."""
    return [(name, type(value).__name__, value) for name, value in params.items()]


def undeclared(where: str, params: Mapping[str, Any]) -> list[str]:
    """What in ``params`` is not as ``LIMITS`` declares it, one line per parameter."""
    if list(params) != list(DECLARED):
        return [f"{where}: parameters {list(params)}, expected {list(DECLARED)}"]
    found = []
    for name, domain in DECLARED.items():
        value = params[name]
        if isinstance(domain, Categorical):
            ok = any(type(value) is type(c) and value == c for c in domain.choices)
        else:
            kind = float if isinstance(domain, Float) else int
            ok = type(value) is kind and domain.low <= value <= domain.high
            if ok and domain.step is not None:
                k = (value - domain.low) / domain.step
                ok = abs(k - round(k)) < 1e-9
        if not ok:
            found.append(f"{where}: {name} = {value!r} ({type(value).__name__}) is not of {domain}")
    return found


def function(params: Mapping[str, Any]) -> float:
    """0 at ``OPTIMUM``, positive elsewhere."""
    return (
        (math.log(params["lr"]) - math.log(OPTIMUM["lr"])) ** 2
        + params["x"] ** 2
        + params["dropout"]
        + abs(math.log(params["width"] / OPTIMUM["width"]))
        + abs(params["layers"] - OPTIMUM["layers"])
        + abs(params["batch"] - OPTIMUM["batch"]) / 8
        + (params["act"] != OPTIMUM["act"])
        + FLAG_COST.get((type(params["flag"]), params["flag"]), 10.0)
    )


def loss(params: dict[str, Any]) -> float:
    failures.extend(undeclared(f"rank {world.rank}, loss function", params))
    return function(params)


def loss_of_worker(params: dict[str, Any], comm: MPI.Comm) -> float:
    failures.extend(undeclared(f"rank {world.rank}, loss function", params))
    seen = comm.allgather(typed(params))
    if any(other != seen[0] for other in seen):
        failures.append(f"rank {world.rank}: the ranks of its worker evaluate different parameters: {seen}")
    return function(params)


rng = random.Random(31 + world.rank)
if args.propagator == "tpe":
    propagator = get_tpe_propagator(LIMITS, rng=31)  # a seed, the same on every rank
else:
    propagator = get_default_propagator(4, LIMITS, rng=rng)
islands = Islands(
    loss if args.ranks_per_worker == 1 else loss_of_worker,
    propagator,
    rng,
    generations=args.generations,
    num_islands=args.num_islands,
    migration_probability=0.9,
    pollination=args.pollination,
    checkpoint_path=args.checkpoint,
    ranks_per_worker=args.ranks_per_worker,
)
islands.propulate(debug=0)
propulator = islands.propulator
comm = world.Dup()
me = f"rank {comm.rank}"

# (c) Every individual every rank holds decodes as declared, inside the box of the embedding.
space = propulator.population[0].space if propulator.population else None
for ind in propulator.population:
    failures.extend(undeclared(f"{me}, population uid {ind.uid}", ind.params()))
    if space is not None and not (
        (ind.position >= space.lower).all() and (ind.position <= space.upper).all()
    ):
        failures.append(f"{me}, population uid {ind.uid}: position {ind.position} outside the box")

# (a) The same best everywhere: the loss of its parameters, the least of every rank's population.
best, best_params, best_loss = propulator.best, propulator.best_params, propulator.best_loss
failures.extend(undeclared(f"{me}, best_params", best_params))
if typed(best_params) != typed(best.params()) or best_loss != best.loss:
    failures.append(f"{me}: best_params/best_loss {best_params} {best_loss} differ from best {best}")
if best_loss != function(best_params):
    failures.append(
        f"{me}: best_loss {best_loss!r} is not the loss of best_params, {function(best_params)!r}"
    )
bests = comm.allgather((typed(best_params), best_loss))
if any(other != bests[0] for other in bests):
    failures.append(f"{me}: the ranks report different bests: {bests}")
losses = [ind.loss for ind in propulator.population if math.isfinite(ind.loss)]
least = comm.allreduce(min(losses, default=math.inf), op=MPI.MIN)
if best_loss != least:
    failures.append(f"{me}: best_loss {best_loss!r}, but the populations' least loss is {least!r}")

# (b) top(5): the same everywhere, sorted, distinct, best first.
top = [(ind.loss, typed(ind.params())) for ind in propulator.top(5)]
tops = comm.allgather(top)
if any(other != tops[0] for other in tops):
    failures.append(f"{me}: the ranks report different top(5): {tops}")
if [loss for loss, _ in top] != sorted(loss for loss, _ in top):
    failures.append(f"{me}: top(5) is not sorted: {top}")
if len({repr(params) for _, params in top}) != len(top) or len(top) != 5:
    failures.append(f"{me}: top(5) holds {len(top)} individuals, not 5 distinct ones: {top}")
if top and top[0] != (best_loss, typed(best_params)):
    failures.append(f"{me}: top(5)[0] {top[0]} is not best {(best_loss, typed(best_params))}")

# (d) A resumed run does at least as well as the session it resumed.
if best_loss > args.at_most:
    failures.append(f"{me}: best_loss {best_loss!r} is worse than the resumed session's {args.at_most!r}")

# The checkpoint as written at the end of the run: its least loss is the best, its rows decode as declared.
comm.Barrier()
result: dict[str, Any] = {}
if comm.rank == 0:
    frame = load_dataframe(args.checkpoint)
    columns = [frame[f"params_{name}"].tolist() for name in LIMITS]
    rows = [dict(zip(LIMITS, row, strict=True)) for row in zip(*columns, strict=True)]
    for number, params in enumerate(rows):
        failures.extend(undeclared(f"checkpoint row {number}", params))
    if frame["value"].min() != best_loss:
        failures.append(f"the checkpoint's least loss is {frame['value'].min()!r}, best_loss {best_loss!r}")
    at_least = [
        typed(params) for params, value in zip(rows, frame["value"], strict=True) if value == best_loss
    ]
    if typed(best_params) not in at_least:
        failures.append(f"best_params {best_params} are in no checkpoint row of loss {best_loss!r}")
    result = {
        "best_loss": best_loss,
        "best_params": typed(best_params),
        "evaluations": len(frame),
        "sessions": int(frame["session"].nunique()),
        "states": sorted(set(frame["state"])),
    }
    print("RESULT " + json.dumps(result), flush=True)
verdict(comm, failures)
