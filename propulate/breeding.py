"""Breeding without repeats: the propagator's offspring, unless the island already knows its parameters.

Every evaluation costs a user minutes to hours of training, so a worker never spends one on parameter values
its island already knows: evaluated (whatever the outcome), or being evaluated by one of its workers as far
as this worker has been told (each worker announces what it evaluates when it starts). Values are compared
by a hash of what they decode to (:meth:`SearchSpace.key`), so the check costs O(1), not a scan of the
population.

An offspring that repeats a known configuration is handed back to the propagator (:meth:`Propagator.reject`)
and the propagator is called again, up to :data:`MAX_ATTEMPTS` times. A propagator that only repeats (a
converged population, a swarm at rest, a selection passed through as the whole propagator) is replaced for
that breeding by a uniform draw from the search space, up to :data:`MAX_DRAWS` draws (a particle at rest,
with zero velocity, when the propagator's offspring are particles). In a finite search
space (integer and categorical parameters only) where the draws find nothing new either, the configurations
nobody has evaluated or is evaluating are listed once and drawn from; when there are none,
:meth:`Breeder.breed` returns ``None``. Once every configuration is evaluated the search space is exhausted
(:meth:`Breeder.exhausted`) and the loop stops the run (a space of 12 configurations costs 12 evaluations,
whatever the budget). Until then the worker withdraws its announcement and waits for news: a peer may still
give up a configuration it announced (below), and must not count on this worker's last announcement as taken
when it does.

Announcements cannot be known before they arrive: two workers that breed the same configuration at the same
moment both announce it before either knows of the other's. After announcing, a worker takes in what arrived
and breeds again if a peer announced, or evaluated, the same configuration. With a float parameter a collision
happens only by chance, and that one look is enough. Where collisions are likely, in a finite space (integers
and categories only), with a propagator whose workers propose alike (:attr:`Propagator.replicated`, as
:class:`ParallelNelderMead`), or once a worker bred a known configuration, one look is not enough: with more
ranks than cores an announcement can wait in its sender's MPI queues while both workers look. There the worker
takes in messages until every peer that may be breeding (:meth:`Breeder.may_be_breeding`) has matched its
announcement (its synchronous send completed). If two workers bred the same configuration, the later of their
last looks comes after the other worker matched its announcement, so at least one of them sees the other's.
The lower rank keeps it: a worker that sees a lower rank's announcement breeds again; one that sees only
higher ranks' waits for their next announcement (they breed again if they saw its own, else they evaluate it)
and breeds again if it does not come in time. So the configuration is evaluated once, and not dropped by both,
which in a nearly exhausted space would end the run with it unevaluated (:meth:`Breeder.verdict` decides).
Peers busy with an evaluation that is not due are not waited for (they do not breed), and the wait ends after
:data:`~propulate.mpi.link.MAX_WAIT` seconds at most (a peer whose evaluation overran). In an island of more
than :data:`propulate.mpi.dissemination.RADIX` workers, where news is relayed, a match by the next hop says
nothing of the others, and one look is all there is. A continuous space with the default propagator does not
wait. What the wait costs and saves, measured: :doc:`/design/architecture`.

The breeder also keeps what its island peers said of their progress, so that the loop can keep breeding
pools fresh: a worker that has started more than :data:`MAX_LAG` evaluations more than a peer whose
running evaluation is due (told of at least :data:`DUE` times the peer's mean evaluation time ago) gives
that peer's news up to :data:`~propulate.mpi.link.MAX_WAIT` seconds to arrive before it breeds
(:meth:`Breeder.behind`). With a cheap loss function and more ranks than cores, a worker otherwise runs ahead
while its peers are not scheduled, breeding from its own results and, in a small search space, from
configurations its peers evaluated meanwhile (a sender's messages reach a receiver that is not scheduled only
as far as the MPI library's shared-memory buffers hold them: 64 messages per sender with MPICH). A peer busy
with an evaluation that is not due is never waited for, so costly evaluations do not pay for this.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from .individual import Individual, Status
from .population import Population
from .propagators.base import Propagator, as_list
from .space import SearchSpace

__all__ = ["DUE", "MAX_ATTEMPTS", "MAX_DRAWS", "MAX_LAG", "Breeder", "find_space"]

log = logging.getLogger("propulate")

#: Calls of the propagator per breeding before a configuration is drawn uniformly instead.
MAX_ATTEMPTS = 16
#: Uniform draws per breeding before a finite space's unevaluated configurations are listed.
MAX_DRAWS = 64
#: How many evaluations an island peer may have started fewer than this worker before the worker gives
#: the peer's news time to arrive (see :meth:`Breeder.behind`). Wide enough that ordinary scheduling
#: jitter between ranks that share cores never makes a worker wait (each wait hands the core over, which
#: costs system calls and context switches), narrow enough that a worker whose peers were not scheduled
#: stops before it has bred many times from its own results alone.
MAX_LAG = 16
#: A peer's running evaluation is due once this many times its mean evaluation time has passed since it
#: announced the evaluation (the margin covers its loop and the scheduling of its rank).
DUE = 1.5


class Breeder:
    """Breeds the individuals one worker evaluates, none of them a configuration its island knows.

    Parameters
    ----------
    propagator : Propagator or callable
        Breeds offspring from a list of parents (see :class:`Propagator`); the first offspring counts.
    population : Population
        The worker's view of its island: the parents, and the configurations it knows.
    rng : random.Random
        The worker's generator, for uniform draws when the propagator only repeats.
    name : str
        Who breeds, for the log (e.g. ``"Island 0, worker 3"``).
    loud : bool
        Log at INFO (one worker per island), else at DEBUG, the first time this worker draws uniformly.
    space : SearchSpace, optional
        The search space of the offspring, if known before the first breeding: it reads the peers'
        announced configurations for a propagator that takes them (:meth:`Propagator.pending`).

    Attributes
    ----------
    repeats : int
        Offspring discarded so far because they repeated a known configuration.
    draws : int
        Breedings so far in which the propagator only repeated and a uniform draw was evaluated instead.
    space : SearchSpace or None
        The search space of the offspring, once one was bred.
    """

    def __init__(
        self,
        propagator: Propagator | Callable[[list[Individual]], Any],
        population: Population,
        rng: random.Random,
        name: str = "",
        loud: bool = False,
        space: SearchSpace | None = None,
    ) -> None:
        self.propagator = propagator
        self.population = population
        self.rng = rng
        self.name = name
        self.loud = loud
        # The pool a propagator breeds from is part of its structure: read once, not every generation.
        self.pool = propagator.breeding_pool if isinstance(propagator, Propagator) else None
        self.repeats = 0
        self.draws = 0
        self.space: SearchSpace | None = space
        # Whether the propagator takes the configurations the island's peers evaluate now.
        self._tells_pending = isinstance(propagator, Propagator) and propagator.uses_pending
        # Whether offspring may repeat known configurations (population-based training): none is refused.
        self._repeats = isinstance(propagator, Propagator) and propagator.repeats
        # What each island peer evaluates now, as far as it told us, and how many peers evaluate each key.
        self._announced: dict[int, int] = {}
        # The announced configurations as SearchSpace.canonical wrote them, for Propagator.pending.
        self._configurations: dict[int, bytes] = {}
        self._running: Counter[int] = Counter()
        # Per island peer still breeding: evaluations it started this session, when it told us of the
        # last one (time.monotonic()), and how long its evaluations take on average (seconds).
        self._peers: dict[int, tuple[int, float, float]] = {}
        # A finite space's unevaluated configurations as (key, position), listed once when first needed.
        self._unlisted: list[tuple[int, np.ndarray]] | None = None

    # ------------------------------------------------------------------------------------- knowing

    def expect(self, peers: list[int], now: float) -> None:
        """Start counting the island peers' progress: none has started an evaluation yet."""
        self._peers = {peer: (0, now, 0.0) for peer in peers}

    def announce(
        self, peer: int, key: int, started: int, period: float, now: float, configuration: bytes | None = None
    ) -> None:
        """Note that ``peer`` started evaluating the configuration of ``key`` (its previous one is done).

        Parameters
        ----------
        peer : int
            Who tells.
        key : int
            :meth:`SearchSpace.key` of the configuration it evaluates now.
        started : int
            How many evaluations it has started this session, this one included.
        period : float
            Its mean evaluation time so far, seconds.
        now : float
            ``time.monotonic()`` when the news arrived.
        configuration : bytes, optional
            The configuration as :meth:`SearchSpace.canonical` wrote it (``key`` is its hash).
        """
        self._forget(peer)
        self._announced[peer] = key
        if configuration is not None:
            self._configurations[peer] = configuration
        self._running[key] += 1
        self._peers[peer] = (started, now, period)

    def hear(self, peer: int, said: Any, now: float) -> None:
        """Take in what ``peer`` said of its evaluations (a :class:`~propulate.mpi.news.Announcement`).

        It starts evaluating the configuration of ``said.key`` (:meth:`announce`), retires
        (:meth:`retire`), or withdraws its announcement (``key`` ``None``: it evaluates nothing now, and may
        breed again); ``now`` is ``time.monotonic()`` when the news arrived.
        """
        if said is None:
            return
        if said.retired:
            self.retire(peer)
        elif said.key is None:  # it withdrew its announcement: it evaluates nothing for now
            self._forget(peer)
        else:
            self.announce(peer, said.key, said.started, said.period, now, said.configuration)

    def retire(self, peer: int) -> None:
        """Note that ``peer`` stopped breeding: it evaluates nothing now, and nobody waits for it."""
        self._forget(peer)
        self._peers.pop(peer, None)

    def _forget(self, peer: int) -> None:
        self._configurations.pop(peer, None)
        previous = self._announced.pop(peer, None)
        if previous is not None:
            self._running[previous] -= 1
            if not self._running[previous]:
                del self._running[previous]

    def behind(self, started: int, now: float) -> bool:
        """Whether a peer's news should have arrived: it is behind, and its running evaluation is due.

        A peer is behind when it has started more than :data:`MAX_LAG` evaluations fewer than this worker
        (``started``); its evaluation is due when it told us of it at least :data:`DUE` times its mean
        evaluation time ago (at once while it has not told us its mean).
        A peer that is merely slower, busy with an evaluation that is not due yet, is not waited for; one
        whose result is due is late only because its messages are (or it has not been scheduled: more
        ranks than cores). O(number of peers).
        """
        for peer_started, told, period in self._peers.values():
            if started - peer_started > MAX_LAG and now - told >= DUE * period:
                return True
        return False

    def may_be_breeding(self, now: float) -> list[int]:
        """Return the island peers that may be breeding at ``now`` (``time.monotonic()``).

        Those whose running evaluation is due (see :meth:`behind`), or that have not told of one yet; a
        peer that retired, or is busy with an evaluation that is not due, does not breed. O(number of
        peers).
        """
        return [peer for peer, (_, told, period) in self._peers.items() if now - told >= DUE * period]

    def claimants(self, key: int) -> list[int]:
        """Return the island peers whose running evaluation, as they announced it, is of ``key``.

        O(1) when there is none, else O(number of peers).
        """
        if key not in self._running:
            return []
        return [peer for peer, announced in self._announced.items() if announced == key]

    def verdict(self, key: int, me: int, confirmed: bool, ending: bool) -> bool | None:
        """Whether the configuration of ``key``, announced by this worker (rank ``me``), is its to evaluate.

        ``False`` once the island evaluated it or a lower rank announced it too; ``True`` once every peer
        that may be breeding has matched the announcement (``confirmed``) and none announced it; ``None``
        while undecided, unless the wait is ``ending`` (its time is up, or the worker stops): then whether no
        peer announced it. O(1) when no peer announced it, else O(number of peers).
        """
        if self._repeats:
            return True
        if self.population.knows(key):
            return False
        claimants = self.claimants(key)
        if any(peer < me for peer in claimants):
            return False
        if (confirmed and not claimants) or ending:
            return not claimants
        return None

    def is_known(self, key: int) -> bool:
        """Whether the island evaluated this configuration or a peer announced it; O(1).

        Never, for a propagator whose offspring may repeat (:attr:`Propagator.repeats`).
        """
        return not self._repeats and (self.population.knows(key) or key in self._running)

    def exhausted(self) -> bool:
        """Whether every configuration of a finite search space is evaluated: nothing is left to breed.

        Unlike :meth:`breed` returning ``None``, which also happens while peers evaluate the last
        configurations (one of them may yet give its configuration up, see the module docstring).
        """
        size = self.space.size if self.space is not None else None
        return size is not None and self.population.n_distinct >= size

    def exhausted_text(self) -> str:
        """Return why breeding ended for the log: the search space is exhausted."""
        size = self.space.size if self.space is not None else "its"
        return f"the search space is exhausted: all {size} configurations are evaluated"

    def _exhausted(self, space: SearchSpace) -> bool:
        """Whether every configuration of a finite ``space`` is evaluated or being evaluated."""
        size = space.size
        if size is None:
            return False
        running = sum(1 for key in self._running if not self.population.knows(key))
        return self.population.n_distinct + running >= size

    # ------------------------------------------------------------------------------------ breeding

    def breed(self) -> Individual | None:
        """Return a new individual of a configuration the island does not know.

        Returns ``None`` if the search space is finite and every configuration is evaluated or being
        evaluated by a peer (see the module docstring and :meth:`exhausted`).

        Raises
        ------
        TypeError
            If the propagator returns no individuals.
        """
        parents = self.population.best(self.pool) if self.pool is not None else self.population.active()
        if self._tells_pending:
            assert isinstance(self.propagator, Propagator)
            self.propagator.pending(self.pending_positions())
        for attempt in range(1, MAX_ATTEMPTS + 1):
            ind = self._offspring(parents)
            space = self.space = ind.space
            if not self.is_known(space.key(ind.position)):
                return ind
            self.repeats += 1
            if attempt < MAX_ATTEMPTS and self._exhausted(space):
                return None  # after the last attempt the draws find out (and say so)
            if isinstance(self.propagator, Propagator):
                self.propagator.reject(ind)
        drawn = self._draw(space)
        if drawn is not None and ind.velocity is not None:
            # The propagator moves particles (PSO): the drawn one starts at rest, as a particle must move.
            drawn.velocity = np.zeros_like(ind.velocity)
        return drawn

    def breed_for(self, generation: int, rank: int, island: int) -> Individual | None:
        """Return :meth:`breed`'s individual as born on this worker (generation, rank, island)."""
        ind = self.breed()
        if ind is None:
            return None
        ind.generation = generation
        ind.rank = ind.current = rank
        ind.island = island
        ind.migration_steps = 0
        ind.migration_history = str(island)
        ind.loss = math.inf
        ind.status = Status.PENDING
        ind.active = True
        return ind

    def pending_positions(self) -> np.ndarray:
        """Return the configurations the island's peers evaluate now, as far as they told this worker.

        One row per peer evaluation under way whose result this worker does not hold yet, as a position
        of the offspring's search space; shape ``(n_pending, ndim)`` (``(0, 0)`` before the space is known).
        O(number of peers).
        """
        space = self.space
        if space is None:
            return np.zeros((0, 0))
        rows = [
            space.from_canonical(configuration)
            for peer, configuration in self._configurations.items()
            if not self.population.knows(self._announced[peer])
        ]
        return np.array(rows) if rows else np.zeros((0, space.ndim))

    def _offspring(self, parents: list[Individual]) -> Individual:
        offspring = as_list(self.propagator(parents))
        if not offspring or not isinstance(offspring[0], Individual):
            raise TypeError(f"propagator {self.propagator!r} returned {offspring!r}; expected individuals")
        ind = offspring[0]
        return ind.child() if ind.uid >= 0 else ind  # a population member passed through: a fresh copy

    def _draw(self, space: SearchSpace) -> Individual | None:
        """Draw a configuration the island does not know uniformly; ``None`` if a finite space has none."""
        self.draws += 1
        if self.draws == 1:
            (log.info if self.loud else log.debug)(
                f"{self.name}: the propagator bred only known configurations, {MAX_ATTEMPTS} times in a row; "
                "a new configuration is drawn uniformly at random instead (logged once per worker)."
            )
        for _ in range(MAX_DRAWS):
            position = space.sample(self.rng)
            key = space.key(position)
            if not self.is_known(key):
                return Individual(position, space)
        if space.size is None:
            # Only a float range narrower than a few representable numbers gets here: take the last draw.
            return Individual(position, space)
        if self._unlisted is None:
            self._unlisted = [(space.key(p), p) for p in space.configurations()]
        self._unlisted = [(key, p) for key, p in self._unlisted if not self.is_known(key)]
        if not self._unlisted:
            return None
        _, position = self._unlisted.pop(self.rng.randrange(len(self._unlisted)))
        return Individual(position.copy(), space)


def find_space(obj: object, depth: int = 0) -> SearchSpace | None:
    """Return the search space a propagator was built for (searching its operators), if it names one."""
    if isinstance(obj, SearchSpace):
        return obj
    if depth > 6:
        return None
    if isinstance(obj, Propagator):
        children: list[object] = list(vars(obj).values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    else:
        return None
    for child in children:
        found = find_space(child, depth + 1)
        if found is not None:
            return found
    return None
