"""SuccessiveHalving (ASHA, Hyperband brackets): the rung rule on hand-made learning curves, and sharing.

Runs are driven as the worker drives a surrogate: ``start_run``, ``cancel`` after each interim loss,
``update`` if not cancelled, ``data`` after the run; ``merge`` on the other workers.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from propulate import Individual
from propulate.surrogate import SuccessiveHalving, Surrogate

LIMITS: dict[str, tuple[Any, ...]] = {"x": (0.0, 1.0)}


def individual(generation: int = 0, rank: int = 0, uid: int = -1) -> Individual:
    ind = Individual({"x": 0.5}, LIMITS, generation=generation, rank=rank)
    ind.uid = uid
    return ind


def evaluate(surrogate: Surrogate, ind: Individual, curve: Sequence[float]) -> tuple[int | None, Any]:
    """One evaluation as the worker does it: the step index it was cancelled at (or None), and its data."""
    surrogate.start_run(ind)
    stopped = next((k for k, loss in enumerate(curve) if surrogate.cancel(loss)), None)
    if stopped is None:
        surrogate.update(curve[-1])
    return stopped, surrogate.data()


def flat(value: float, steps: int = 8) -> list[float]:
    return [value] * steps


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"min_resource": 0}, "min_resource"),
        ({"min_resource": True}, "min_resource"),
        ({"reduction_factor": 1}, "reduction_factor"),
        ({"reduction_factor": 2.5}, "reduction_factor"),
        ({"max_resource": 1}, "max_resource"),
        ({"min_resource": 3, "max_resource": 3}, "max_resource"),
        ({"brackets": 0}, "brackets"),
        ({"brackets": 2}, "brackets"),  # brackets need a max_resource
        ({"max_resource": 9, "brackets": 4}, "brackets"),  # s_max = 2 with eta = 3
    ],
)
def test_arguments_are_validated(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SuccessiveHalving(**kwargs)


def test_s_max():
    assert SuccessiveHalving(max_resource=9, brackets=3).s_max == 2
    assert SuccessiveHalving(min_resource=2, reduction_factor=2, max_resource=17).s_max == 3
    assert SuccessiveHalving().s_max == 0


def test_runs_continue_while_a_rung_holds_fewer_than_eta_results():
    asha = SuccessiveHalving(reduction_factor=3)
    # The first two runs pass every rung however bad they are: each rung holds at most 2 results.
    assert evaluate(asha, individual(0), flat(5.0))[0] is None
    assert evaluate(asha, individual(1), flat(9.0))[0] is None
    # The third is the 3rd result at rung 0 (resource 1): floor(3 / 3) = 1 continues, the best.
    assert evaluate(asha, individual(2), flat(7.0))[0] == 0
    assert evaluate(asha, individual(3), flat(1.0))[0] is None


def test_runs_outside_the_best_share_are_cancelled_at_their_rung():
    asha = SuccessiveHalving(reduction_factor=2)
    for g, loss in enumerate((1.0, 2.0)):
        evaluate(asha, individual(g), flat(loss, 1))
    # Rung 0 now holds 1 and 2; with 3.0 it holds 3 results, floor(3 / 2) = 1 continues.
    assert evaluate(asha, individual(2), flat(3.0, 1))[0] == 0
    assert evaluate(asha, individual(3), flat(0.5, 1))[0] is None
    # 4 results (1, 2, 3, 0.5) + 1.5: floor(5 / 2) = 2 continue; 1.5 has 2 lower -> cancelled; 0.9 passes.
    assert evaluate(asha, individual(4), flat(1.5, 1))[0] == 0
    # Ties count in the run's favour: 1.0 has only 0.5 strictly lower (6 results, 3 continue).
    assert evaluate(asha, individual(5), flat(1.0, 1))[0] is None
    assert sorted(asha.records()[0][0].values()) == [0.5, 1.0, 1.0, 1.5, 2.0, 3.0]


def test_decisions_are_taken_at_each_rung_and_only_there():
    asha = SuccessiveHalving(min_resource=1, reduction_factor=2)  # rungs at 1, 2, 4, 8 interim losses
    # Two reference runs fill rungs 0..3 with (1, 2) each.
    evaluate(asha, individual(0), flat(1.0, 8))
    evaluate(asha, individual(1), flat(2.0, 8))
    # Good at steps 1 and 2 (resources 1 and 2), bad at step 4 (resource 4, rung 2): cancelled there,
    # not at the bad steps 3 and 5..7 which are not rungs, and not before.
    curve = [0.5, 0.5, 9.0, 9.0, 9.0]
    assert evaluate(asha, individual(2), curve)[0] == 3
    records = asha.records()[0]
    assert [rung["r0g2"] for rung in records[:3]] == [0.5, 0.5, 9.0]
    assert "r0g2" not in records[3]
    # The same curve, bad only between rungs, passes them all.
    assert evaluate(asha, individual(3), [0.5, 0.5, 9.0, 0.5, 9.0, 9.0, 9.0, 0.5])[0] is None


def test_min_resource_shifts_the_rungs():
    asha = SuccessiveHalving(min_resource=2, reduction_factor=2)  # rungs at 2, 4, 8
    assert [asha.rung_resource(0, k) for k in range(3)] == [2, 4, 8]
    for g in range(2):
        evaluate(asha, individual(g), flat(1.0))
    assert evaluate(asha, individual(2), flat(5.0))[0] == 1  # the 2nd interim loss is rung 0


def test_max_resource_stops_the_rungs():
    bad = [0.1, 0.1, 9.0, 9.0, 9.0]
    unbounded = SuccessiveHalving(reduction_factor=2)
    bounded = SuccessiveHalving(reduction_factor=2, max_resource=4)
    for asha in (unbounded, bounded):
        for g in range(2):
            evaluate(asha, individual(g), flat(0.5, 5))
    # At resource 4 the unbounded one judges (and cancels); the bounded one has reached R and does not.
    assert evaluate(unbounded, individual(2), bad)[0] == 3
    assert evaluate(bounded, individual(2), bad)[0] is None
    assert len(bounded.records()[0]) == 2  # rungs at resources 1 and 2 only


def test_non_finite_interim_losses_cancel_and_are_not_recorded():
    asha = SuccessiveHalving()
    assert evaluate(asha, individual(0), [math.nan])[0] == 0
    assert evaluate(asha, individual(1), [1.0, math.inf])[0] == 1
    assert asha.records()[0][0] == {"r0g1": 1.0}


def test_brackets_are_assigned_by_generation_and_keep_their_own_rungs():
    asha = SuccessiveHalving(min_resource=1, reduction_factor=3, max_resource=9, brackets=3)
    assert [asha.bracket_of(individual(g)) for g in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [asha.rung_resource(1, k) for k in range(2)] == [3, 9]
    # Fill bracket 0's first rung with good results; bracket 1 and 2 runs are not judged against them.
    for g in (0, 3):
        evaluate(asha, individual(g), flat(0.1, 9))
    bad = flat(5.0, 9)
    assert evaluate(asha, individual(6), bad)[0] == 0  # bracket 0: third result at resource 1
    assert evaluate(asha, individual(1), bad)[0] is None  # bracket 1: rung at 3, fewer than 3 results
    assert evaluate(asha, individual(4), flat(0.1, 9))[0] is None
    assert evaluate(asha, individual(7), bad)[0] == 2  # bracket 1: cancelled at resource 3 (step index 2)
    # Bracket 2's only rung would be at 9 = max_resource: no early stopping at all (random search).
    for g in (2, 5, 8, 11):
        assert evaluate(asha, individual(g), bad)[0] is None
    records = asha.records()
    assert set(records) == {0, 1}
    assert len(records[0]) == 2 and len(records[1]) == 1  # bracket 0: rungs at 1, 3; bracket 1: at 3
    assert records[1][0] == {"r0g1": 5.0, "r0g4": 0.1, "r0g7": 5.0}


def test_data_is_json_serializable_and_keyed_by_uid():
    asha = SuccessiveHalving(reduction_factor=2, max_resource=8, brackets=2)
    _, data = evaluate(asha, individual(1, uid=123456789012), [3.0, 2.0, 1.0, 0.5, 0.4])
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data == {"key": "123456789012", "bracket": 1, "losses": [2.0, 0.5]}
    # A run that reached no rung has nothing to share.
    assert evaluate(asha, individual(3), [1.0])[1] is None


def test_merge_rejects_records_not_made_by_data():
    asha = SuccessiveHalving()
    asha.merge(None)
    for bad in ({"key": "a"}, [1, 2], {"key": "a", "bracket": "x", "losses": []}, {"curve": [1.0]}):
        with pytest.raises(ValueError, match="data"):
            asha.merge(bad)


def test_a_run_without_data_leaves_no_record():
    asha = SuccessiveHalving()
    asha.start_run(individual(0))
    assert not asha.cancel(1.0)  # then the evaluation failed: the worker never asks for data()
    assert asha.records() == {}
    evaluate(asha, individual(1), flat(2.0, 3))
    assert asha.records()[0][0] == {"r0g1": 2.0}


def curves(seed: int, n: int, steps: int = 9) -> list[list[float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        final, start, a = rng.uniform(0.0, 1.0), rng.uniform(1.0, 3.0), rng.uniform(0.3, 2.0)
        out.append([final + (start - final) * (t + 1) ** -a for t in range(steps)])
    return out


@pytest.mark.parametrize("brackets", [1, 3])
def test_merged_records_of_two_workers_give_the_same_decisions(brackets):
    def make() -> SuccessiveHalving:
        return SuccessiveHalving(reduction_factor=3, max_resource=9, brackets=brackets)

    a, b = make(), make()
    shared = []
    for i, curve in enumerate(curves(0, 24)):
        worker, other = (a, b) if i % 2 == 0 else (b, a)
        _, data = evaluate(worker, individual(i // 2, rank=i % 2), curve)
        if data is not None:
            other.merge(json.loads(json.dumps(data)))
            shared.append(data)
    # Each knows every run: the same records, and so the same decisions on new curves.
    assert a.records() == b.records()
    # A fresh surrogate that merges every record, in any order and some twice, as on resume, too.
    rebuilt = make()
    for data in random.Random(1).sample(shared, len(shared)) + shared[:5]:
        rebuilt.merge(data)
    assert rebuilt.records() == a.records()
    for i, curve in enumerate(curves(1, 12)):
        ind = individual(100 + i, rank=7)
        decisions = []
        for surrogate in (a, b, rebuilt):
            surrogate.start_run(ind)  # probe without data(): the records stay as they are
            decisions.append(next((k for k, loss in enumerate(curve) if surrogate.cancel(loss)), None))
        assert len(set(decisions)) == 1, decisions
    assert rebuilt.records() == a.records()


def test_a_surrogate_that_misses_records_may_decide_differently():
    # The rule depends on what a worker knows: with the other worker's records it cancels, without not.
    informed, alone = SuccessiveHalving(reduction_factor=2), SuccessiveHalving(reduction_factor=2)
    for g in range(2):
        evaluate(informed, individual(g, rank=1), flat(0.1, 2))
    probe = [1.0, 1.0]
    assert evaluate(informed, individual(5), probe)[0] == 0
    assert evaluate(alone, individual(5), probe)[0] is None


def test_the_curve_benchmark_runs():
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "asha_curves.py"
    out = subprocess.run(
        [sys.executable, str(script), "--seeds", "2", "--configs", "12", "--epochs", "9"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "method" not in line]
    assert [row.split(" | ")[0] for row in rows][:5] == ["| none", "| static (margin 0.8)"] + [
        f"| ASHA eta={eta}" for eta in (2, 3, 4)
    ]
    assert rows[0].endswith("| 100% | 100% | 0.0000 | 100.0% |")


def test_interim_data_hands_out_each_rung_result_once_as_the_run_reaches_it():
    surrogate = SuccessiveHalving(min_resource=1, reduction_factor=3, max_resource=27)
    surrogate.start_run(individual(uid=5))
    shared = []
    for loss in [3.0, 2.5, 2.0, 1.9]:  # rungs at 1 and 3 interim losses
        surrogate.cancel(loss)
        shared.append(surrogate.interim_data())
    assert shared == [
        {"key": "5", "bracket": 0, "losses": [3.0]},
        None,
        {"key": "5", "bracket": 0, "losses": [3.0, 2.0]},
        None,
    ]
    # Merging the interim records, then the final data, records what merging the final data alone does.
    early, late = SuccessiveHalving(1, 3, 27), SuccessiveHalving(1, 3, 27)
    for record in shared:
        early.merge(record)
    final = surrogate.data()
    early.merge(final)
    late.merge(final)
    assert early.records() == late.records() == {0: [{"5": 3.0}, {"5": 2.0}]}


def test_a_rung_result_sent_at_once_counts_in_another_worker_s_decision():
    """Two workers: the second judges its run against the first's rung result before the first run ends."""
    first, second = SuccessiveHalving(1, 2, 9), SuccessiveHalving(1, 2, 9)
    first.start_run(individual(uid=1))
    first.cancel(1.0)  # the first run reaches rung 0 with a good loss and trains on
    second.merge(first.interim_data())
    second.start_run(individual(uid=2))
    # With the first run's record, 2 results at rung 0 and eta 2: the worse one is cancelled.
    assert second.cancel(5.0) is True


def test_a_replayed_run_does_not_share_its_rung_results_again():
    surrogate = SuccessiveHalving(1, 3, 27)
    surrogate.start_run(individual(uid=8))
    for loss in [3.0, 2.5, 2.0]:
        surrogate.replay(loss)
    assert surrogate.interim_data() is None
    surrogate.cancel(1.9)
    assert surrogate.interim_data() is None  # not a rung
