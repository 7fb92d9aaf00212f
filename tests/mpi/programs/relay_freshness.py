"""How fresh relayed island news is when a worker breeds, with evaluations that take a while.

One island, relay radix 2 (news reaches some workers through another worker), a loss that sleeps
``--seconds``. A wrapper around the default propagator counts the individuals that entered the worker's
population (:meth:`Propagator.observe`) and notes them each time it breeds. At the end every rank knows
when each of the island's evaluations ended (``Individual.evaltime``); a breeding is *stale* when it did
not know an individual whose evaluation had ended ``--margin`` seconds before it. With ``--background``
the watchdog thread passes news on during evaluations (the library's behaviour); without, the loop only
relays between its evaluations. Rank 0 prints ``RESULT {json}``: the stale breedings and the most
individuals one of them missed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from mpi4py import MPI

from propulate import Islands, Propulator
from propulate.mpi import dissemination
from propulate.propagators import Propagator
from propulate.utils import get_default_propagator

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--generations", type=int, default=5)
parser.add_argument("--seconds", type=float, default=1.0)
parser.add_argument("--margin", type=float, default=0.15)
parser.add_argument("--stagger", type=float, default=0.25)
parser.add_argument("--background", action="store_true")
args = parser.parse_args()
dissemination.RADIX = 2
if not args.background:
    # Relay between evaluations only: the watchdog thread takes in alarm messages, nothing else.
    Propulator._poll_in_background = lambda self: self._stops.alarm.poll()  # type: ignore[method-assign]

world = MPI.COMM_WORLD
limits = {"x": (-5.0, 5.0), "y": (-5.0, 5.0)}


class Counting(Propagator):
    """The default propagator, noting how many individuals the worker knew at each breeding."""

    def __init__(self, inner: Propagator) -> None:
        super().__init__(inner.parents, inner.offspring)
        self.inner = inner
        self.known: set[int] = set()
        self.breedings: list[tuple[float, frozenset[int]]] = []

    @property
    def breeding_pool(self):
        return self.inner.breeding_pool

    def observe(self, ind) -> None:
        self.known.add(ind.uid)

    def __call__(self, inds):
        self.breedings.append((time.time(), frozenset(self.known)))
        return self.inner(inds)


calls = 0


def loss(params):
    global calls
    calls += 1
    # The first evaluation is longer by a different amount on each worker: their evaluations end at
    # different moments from then on (the run starts with collective steps, so a sleep before would not).
    time.sleep(args.seconds + (args.stagger * (world.size - 1 - world.rank) if calls == 1 else 0.0))
    return params["x"] ** 2 + params["y"] ** 2


rng = random.Random(7 + world.rank)
propagator = Counting(get_default_propagator(4, limits, rng=rng))
islands = Islands(loss, propagator, rng, generations=args.generations, checkpoint_path=args.checkpoint)
islands.propulate(debug=0)
ended = [(ind.evaltime, ind.uid) for ind in islands.propulator.population]
stale = 0
shortfall = 0
for moment, known in propagator.breedings[1:]:
    missing = sum(1 for t, uid in ended if t < moment - args.margin and uid not in known)
    if missing:
        stale += 1
        shortfall = max(shortfall, missing)
stale = world.allreduce(stale)
shortfall = world.allreduce(shortfall, op=MPI.MAX)
breedings = world.allreduce(len(propagator.breedings) - 1)
if world.rank == 0:
    result = {"stale": stale, "shortfall": shortfall, "breedings": breedings}
    print("RESULT " + json.dumps(result), flush=True)
sys.stdout.flush()
