"""The one way into a worker's view of its island: population, observer, surrogate, progress, record."""

from __future__ import annotations

from typing import Any

import pytest

from propulate import Individual
from propulate.checkpoint import Record
from propulate.individual import Status
from propulate.island_state import IslandState, retention
from propulate.surrogate import Surrogate

LIMITS = {"x": (0.0, 1.0)}


def individual(uid: int, loss: float, migration_steps: int = 0) -> Individual:
    ind = Individual({"x": loss}, LIMITS)
    ind.uid, ind.loss, ind.status, ind.migration_steps = uid, loss, Status.COMPLETED, migration_steps
    return ind


class Recorder:
    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def record(self, kind: Record, ind: Individual, home: int | None = None) -> None:
        self.rows.append((kind, ind.uid, home))

    def deactivated(self, uid: int) -> None:
        self.rows.append((Record.DEACTIVATED, uid, None))


class Counter:
    def __init__(self) -> None:
        self.counted: list[int] = []

    def count(self, individuals: Any) -> None:
        self.counted.extend(ind.uid for ind in individuals)


class Learning(Surrogate):
    def __init__(self) -> None:
        self.merged: list[Any] = []

    def cancel(self, loss: float) -> bool:
        return False

    def merge(self, data: Any) -> None:
        self.merged.append(data)


def make() -> tuple[IslandState, list[int], Learning, Recorder, Counter]:
    seen: list[int] = []
    surrogate, recorder, counter = Learning(), Recorder(), Counter()
    state = IslandState(lambda ind: seen.append(ind.uid), surrogate, recorder, counter)
    return state, seen, surrogate, recorder, counter


def test_an_own_evaluation_enters_everything_once_and_deactivates_what_it_replaced() -> None:
    state, seen, _, recorder, counter = make()
    state.arrived([individual(1, 0.9, migration_steps=1)], [])
    state.evaluated(individual(2, 0.1), replaced=[1])
    assert [ind.uid for ind in state.population] == [1, 2]
    assert not state.population.get(1).active  # type: ignore[union-attr]
    assert seen == [1, 2]
    assert counter.counted == [2], "immigrants are counted on their own island"
    assert recorder.rows == [
        (Record.ARRIVED, 1, None),
        (Record.EVALUATED, 2, None),
        (Record.DEACTIVATED, 1, None),
    ]


def test_what_peers_told_is_stored_shown_merged_and_counted_but_not_recorded() -> None:
    state, seen, surrogate, recorder, counter = make()
    told = individual(5, 0.5)
    told.surrogate_data = {"baseline": [0.5]}
    state.told([[told], [individual(6, 0.6)]], deactivated=[6, 99])
    assert seen == [5, 6] and counter.counted == [5, 6]
    assert surrogate.merged == [{"baseline": [0.5]}]
    assert recorder.rows == []
    assert not state.population.get(6).active  # type: ignore[union-attr]
    state.told([[individual(99, 0.2)]], [])
    assert not state.population.get(99).active, "a deactivation may arrive before its individual"  # type: ignore[union-attr]


def test_departures_are_recorded_for_their_target_and_surrogate_news_is_merged() -> None:
    state, _, surrogate, recorder, _ = make()
    state.departed([individual(8, 0.3)], target=2)
    state.merge({"rung": 3})
    assert recorder.rows == [(Record.DEPARTED, 8, 2)]
    assert surrogate.merged == [{"rung": 3}]


def test_a_restored_population_past_the_memory_limit_is_released_to_the_best(monkeypatch) -> None:
    monkeypatch.setenv("PROPULATE_MEMORY_LIMIT", "10")
    state = IslandState()
    state.restore([individual(uid, uid / 100) for uid in range(30)], retained=4)
    assert state.population.n_known == 30
    assert sorted(ind.uid for ind in state.population) == [0, 1, 2, 3]
    for uid in range(30, 40):
        state.evaluated(individual(uid, 1.0), [])
    assert len(state.population) < 10 + 4


def test_without_retention_everything_stays() -> None:
    state = IslandState()
    state.restore([individual(uid, 0.5) for uid in range(50)], retained=None)
    assert len(state.population) == 50


@pytest.mark.parametrize(
    ("pool", "exact", "keep_best", "expected"),
    [(None, True, 0, None), (8, False, 0, None), (8, True, 0, 200), (300, True, 0, 600), (8, True, 150, 300)],
)
def test_retention_keeps_twice_the_largest_pool(pool, exact, keep_best, expected) -> None:
    assert retention(pool, exact, keep_best, kept=100) == expected
