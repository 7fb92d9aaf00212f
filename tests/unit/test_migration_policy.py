"""What a migration policy returns: whom to send where, whom immigrants replace; the isolated null object."""

from __future__ import annotations

import itertools
import random

from propulate import Individual
from propulate.individual import Status
from propulate.migration import Emigration, IsolatedIslands, MigrationPolicy, Topology
from propulate.population import Population
from propulate.propagators import SelectMax, SelectMin

LIMITS = {"x": (0.0, 1.0)}


def population(losses: list[float], current: int = 0) -> Population:
    store = Population()
    for uid, loss in enumerate(losses):
        ind = Individual({"x": loss}, LIMITS)
        ind.uid, ind.loss, ind.status, ind.current = uid, loss, Status.COMPLETED, current
        store.add(ind)
    return store


def policy(pollination: bool, island_size: int = 2) -> MigrationPolicy:
    topology = Topology.of("complete", 3)
    return MigrationPolicy(0, topology, 1.0, SelectMin, SelectMax, pollination, random.Random(0), island_size)


def test_migration_sends_the_best_once_and_deactivates_them_here() -> None:
    store = population([0.5, 0.1, 0.3])
    uids = itertools.count(100)
    sent = policy(pollination=False).emigrate(store, owner=0, mint_uid=lambda: next(uids))
    assert [(e.target, [t.uid for t in e.travellers], e.departed) for e in sent] == [
        (1, [100], [1]),
        (2, [101], [2]),
    ]
    assert all(isinstance(e, Emigration) for e in sent)
    traveller = sent[0].travellers[0]
    assert traveller.active and traveller.migration_steps == 1 and traveller.migration_history.endswith("-1")
    assert [ind.uid for ind in store.active()] == [0]


def test_a_migrant_leaves_only_from_the_worker_responsible_for_it() -> None:
    store = population([0.5, 0.1], current=1)
    assert policy(pollination=False).emigrate(store, owner=0, mint_uid=lambda: 7) == []


def test_pollination_sends_copies_and_deactivates_nothing() -> None:
    store = population([0.5, 0.1], current=1)
    sent = policy(pollination=True).emigrate(store, owner=0, mint_uid=lambda: 7)
    assert [e.departed for e in sent] == [[], []]
    assert len(store.active()) == 2


def test_pollinators_replace_the_worst_and_an_island_pays_its_debt_later() -> None:
    pollinating = policy(pollination=True, island_size=2)
    store = population([0.5])
    travellers = [Individual({"x": 0.2}, LIMITS) for _ in range(3)]
    assert pollinating.immigrate(travellers, store) == [0]
    assert [t.current for t in travellers] == [0, 1, 0] and pollinating.next_owner == 1
    assert pollinating.owed_replacements == 2
    store.deactivate(0)
    fresh = population([0.9, 0.8])
    assert pollinating.replacements(fresh) == [0, 1] and pollinating.owed_replacements == 0


def test_migration_replaces_nothing() -> None:
    assert policy(pollination=False).immigrate([Individual({"x": 0.2}, LIMITS)], population([0.5])) == []


def test_isolated_islands_send_and_replace_nothing() -> None:
    isolated = IsolatedIslands()
    store = population([0.5])
    assert not isolated.wants_to_emigrate() and isolated.targets() == []
    assert isolated.emigrate(store, 0, lambda: 1) == []
    assert isolated.immigrate([], store) == [] and isolated.replacements(store) == []
    assert (isolated.owed_replacements, isolated.next_owner) == (0, 0)
