"""What taking in one island peer's result costs a worker in Python, in one process, without MPI.

A peer's update (its evaluated individual and its announcement of the next one, as :class:`IslandNews`
writes it) is pickled once per result, as the mailbox sends it; each one is then taken in as the loop
does, and each step is timed on its own (``time.perf_counter`` around it, about 0.1 µs each):

- ``loads``: ``pickle.loads`` of the message (mpi4py's receive unpickles it so);
- ``read``: :meth:`IslandNews.read` (the individuals unpacked, the announcement) and the
  :class:`~propulate.mpi.link.PeerUpdate` the link hands the loop;
- ``told``: :meth:`IslandState.told` (stored in the population and shown to the propagator if it observes,
  as in the loop; the progress counts of a run with a progress report, not made here, come on top);
- ``hear``: :meth:`Breeder.hear` (the announcement noted for the breeding without repeats).

Rank-free: what MPI and the sharing of cores add comes on top (``overhead.py`` measures the whole loop,
``floor.py`` the bare message pattern). Prints one JSON line per repeat: microseconds per result, per step
and in total, and the individuals the worker holds at the end (``stored``, one per result).

Usage::

    python benchmarks/receive_cost.py --results 4000 --dims 10 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import time
from typing import Any

from propulate import Individual, Status
from propulate.breeding import Breeder
from propulate.island_state import IslandState
from propulate.mpi.link import PeerUpdate
from propulate.mpi.news import IslandNews
from propulate.utils import get_default_propagator

STEPS = ("loads", "read", "told", "hear")


def messages(results: int, dims: int, seed: int = 1) -> tuple[dict[str, tuple[float, float]], list[bytes]]:
    """Return the search space's limits and ``results`` pickled updates of one peer, in the order sent."""
    limits = {f"x{i}": (-5.12, 5.12) for i in range(dims)}
    rng = random.Random(seed)
    sender = IslandNews(has_peers=True)

    def drawn() -> Individual:
        return Individual({name: rng.uniform(-5.0, 5.0) for name in limits}, limits)

    frames = []
    for uid in range(results):
        ind = drawn()
        ind.uid, ind.generation, ind.rank = uid, uid, 1
        ind.loss, ind.status = rng.random(), Status.COMPLETED
        ind.evaltime, ind.evalperiod = time.time(), 1e-5
        sender.queue([ind], [])
        update = sender.update(drawn(), started=uid + 1, period=1e-5)
        frames.append(pickle.dumps(update, protocol=pickle.HIGHEST_PROTOCOL))
    return limits, frames


def take_in(limits: dict[str, Any], frames: list[bytes], seed: int = 2) -> tuple[dict[str, float], int]:
    """Take in ``frames`` as a fresh worker would.

    Returns microseconds per result, per step and in total, and the individuals the worker then holds.
    """
    news = IslandNews(has_peers=True)
    propagator = get_default_propagator(8, limits, rng=random.Random(seed))
    state = IslandState(propagator.observe if propagator.observes else None)
    breeder = Breeder(propagator, state.population, random.Random(seed + 1))
    spent = dict.fromkeys(STEPS, 0.0)
    clock = time.perf_counter
    for frame in frames:
        start = clock()
        update = pickle.loads(frame)
        unpickled = clock()
        runs, deactivated, said = news.read(1, update)
        PeerUpdate(1, runs, deactivated, said)
        read = clock()
        state.told(runs, deactivated)
        told = clock()
        breeder.hear(1, said, time.monotonic())
        heard = clock()
        spent["loads"] += unpickled - start
        spent["read"] += read - unpickled
        spent["told"] += told - read
        spent["hear"] += heard - told
    per_result = {step: 1e6 * seconds / len(frames) for step, seconds in spent.items()}
    per_result["total"] = sum(per_result.values())
    return per_result, len(state.population)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=4000, help="peer results taken in per repeat")
    parser.add_argument("--dims", type=int, default=10, help="float parameters of the search space")
    parser.add_argument("--repeats", type=int, default=3, help="repeats, each with a fresh worker")
    args = parser.parse_args(argv)
    for name in ("results", "dims", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    limits, frames = messages(args.results, args.dims)
    for repeat in range(args.repeats):
        costs, stored = take_in(limits, frames)
        line = {"benchmark": "receive_cost", "repeat": repeat, "results": args.results, "dims": args.dims}
        line["stored"] = stored
        line["bytes_per_message"] = sum(map(len, frames)) / len(frames)
        line.update({f"{step}_us": round(value, 3) for step, value in costs.items()})
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
