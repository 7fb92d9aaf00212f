"""Several objectives on one process: reading objectives, Pareto geometry, and where losses travel.

Covers :mod:`propulate.objectives` (``Objectives``, ``pareto_ranks``, ``crowding_distance``, ``hypervolume``,
``pareto_front``), :attr:`Individual.losses`, the evaluator with ``objectives``, the Pareto selections, the
``values_<i>`` columns of :func:`propulate.report.frame.to_dataframe` and the front of ``RunResults``. The
ranks are checked against a brute-force non-dominated sorting (Deb et al., IEEE TEC 6(2), 2002,
Sec. III-A), the hypervolumes against boxes computed by hand.
"""

from __future__ import annotations

import math
import pickle
import random
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest
from mpi4py import MPI

from propulate import individual as individual_module
from propulate.evaluation import Evaluator
from propulate.individual import Individual, Status
from propulate.objectives import Objectives, crowding_distance, hypervolume, pareto_front, pareto_ranks
from propulate.propagators import SelectParetoBest, SelectParetoWorst
from propulate.report import to_dataframe
from propulate.run_results import NoResultError, RunResults, gather_results

LIMITS = {"x": (0.0, 4.0), "act": ("relu", "tanh")}
ERR_ACC = {"err": "minimize", "acc": "maximize"}
T0 = 1_700_000_000.0  # epoch seconds of the first evaluation


def individual(x: float, losses: tuple[float, ...] | None, status: Status = Status.COMPLETED) -> Individual:
    """An individual at ``x`` with ``losses`` (its loss the first of them, NaN without them)."""
    ind = Individual({"x": x, "act": "relu"}, LIMITS)
    ind.losses = losses
    ind.loss = losses[0] if losses is not None else math.nan
    ind.status = status
    return ind


def brute_force_ranks(points: np.ndarray) -> np.ndarray:
    """Pareto ranks by peeling off the non-dominated points again and again, O(n^2) per front."""
    points = np.asarray(points, dtype=np.float64)
    points = np.where(np.isnan(points), np.inf, points)
    ranks = np.full(len(points), -1)
    left = set(range(len(points)))
    rank = 0
    while left:
        front = {
            i
            for i in left
            if not any(np.all(points[j] <= points[i]) and np.any(points[j] < points[i]) for j in left)
        }
        ranks[sorted(front)] = rank
        left -= front
        rank += 1
    return ranks


# ---------------------------------------------------------------------------------------------------------
# Objectives.of
# ---------------------------------------------------------------------------------------------------------


def test_none_means_one_loss():
    assert Objectives.of(None) is None


def test_a_count_names_values_i_all_minimized():
    objectives = Objectives.of(2)
    assert objectives.names == ("values_0", "values_1")
    assert objectives.directions == ("minimize", "minimize")
    assert objectives.signs == (1.0, 1.0)
    assert not objectives.named
    assert len(objectives) == 2
    assert Objectives.of(np.int64(3)).names == ("values_0", "values_1", "values_2")


def test_names_are_minimized_in_their_order():
    objectives = Objectives.of(["err", "latency"])
    assert objectives.names == ("err", "latency")
    assert objectives.directions == ("minimize", "minimize")
    assert objectives.named


def test_a_mapping_gives_directions_and_maximize_is_negated():
    objectives = Objectives.of(ERR_ACC)
    assert objectives.names == ("err", "acc")
    assert objectives.directions == ("minimize", "maximize")
    assert objectives.signs == (1.0, -1.0)


@pytest.mark.parametrize("spec", [1, 3, ["a", "b"], ("a", "b", "c"), ERR_ACC, {"a": "maximize"}])
def test_describe_round_trips(spec):
    objectives = Objectives.of(spec)
    assert Objectives.of(objectives.describe()) == objectives
    assert hash(Objectives.of(objectives.describe())) == hash(objectives)
    assert Objectives.of(objectives) is objectives


def test_equality_sees_names_and_directions():
    assert Objectives.of(2) != Objectives.of(["values_0", "values_1"])  # named or not reads mappings apart
    assert Objectives.of(["a", "b"]) != Objectives.of({"a": "minimize", "b": "maximize"})
    assert Objectives.of(["a", "b"]) == Objectives.of({"a": "minimize", "b": "minimize"})


@pytest.mark.parametrize(
    "spec",
    [
        0,
        -1,
        True,
        2.0,
        [],
        {},
        ["a", "a"],
        ["a", 1],
        [""],
        {"a": "max"},
        {"a": "minimize", "b": None},
        "err",
        b"err",
        {"err", "acc"},
    ],
    # A set's repr follows the string hashes of its process: sorted, so that every pytest-xdist worker
    # collects the same test names.
    ids=lambda spec: f"set({sorted(spec)!r})" if isinstance(spec, set) else repr(spec),
)
def test_invalid_objectives_raise_naming_the_argument(spec):
    with pytest.raises(ValueError, match="objectives"):
        Objectives.of(spec)


# ---------------------------------------------------------------------------------------------------------
# Objectives.interpret
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        (0.5, 2),
        [0.5, 2.0],
        np.array([0.5, 2.0]),
        np.array([0.5, 2.0], dtype=np.float32),
        (np.float32(0.5), np.int64(2)),
        (np.float64(0.5), np.array(2.0)),
    ],
    ids=["tuple", "list", "array", "float32 array", "numpy scalars", "0-d array"],
)
def test_sequences_are_read_in_order(result):
    losses, metrics = Objectives.of(2).interpret(result)
    assert losses == (0.5, 2.0)
    assert all(type(v) is float for v in losses)
    assert metrics == {}


def test_tensors_are_read():
    torch = pytest.importorskip("torch")
    assert Objectives.of(2).interpret(torch.tensor([0.5, 2.0])) == ((0.5, 2.0), {})
    assert Objectives.of(2).interpret((torch.tensor(0.5), torch.tensor(2))) == ((0.5, 2.0), {})
    trained = torch.tensor([0.5, 2.0], requires_grad=True) * 1.0
    assert Objectives.of(2).interpret(trained) == ((0.5, 2.0), {})


def test_a_mapping_holds_the_named_objectives_and_metrics():
    losses, metrics = Objectives.of(["err", "latency"]).interpret(
        {"latency": 3.0, "epochs": 7, "err": 0.25, "lr": np.float32(0.5)}
    )
    assert losses == (0.25, 3.0)
    assert metrics == {"epochs": 7.0, "lr": 0.5}


def test_a_mapping_may_hold_the_objectives_under_loss():
    losses, metrics = Objectives.of(2).interpret({"loss": np.array([1.0, 2.0]), "acc": 0.9})
    assert losses == (1.0, 2.0)
    assert metrics == {"acc": 0.9}


def test_a_mapping_without_the_objectives_names_what_is_missing():
    with pytest.raises(ValueError, match=r"\['acc'\]"):
        Objectives.of(ERR_ACC).interpret({"err": 0.1, "accuracy": 0.9})
    with pytest.raises(ValueError, match="loss"):
        Objectives.of(2).interpret({"values_0": 0.1, "values_1": 0.9})


def test_maximized_objectives_are_negated_and_values_inverts_it():
    objectives = Objectives.of(ERR_ACC)
    losses, _ = objectives.interpret((0.1, 0.9))
    assert losses == (0.1, -0.9)
    assert objectives.values(losses) == (0.1, 0.9)
    assert objectives.interpret({"acc": 0.8, "err": 0.2})[0] == (0.2, -0.8)


@pytest.mark.parametrize("result", [(1.0, 2.0, 3.0), [1.0], np.zeros(3), 1.0, np.float64(1.0)])
def test_another_count_raises_naming_the_objectives(result):
    count = len(result) if hasattr(result, "__len__") else 1
    with pytest.raises(ValueError, match=rf"returned {count} objective.*2 objectives \['err', 'acc'\]"):
        Objectives.of(ERR_ACC).interpret(result)


@pytest.mark.parametrize(
    "result",
    ["ab", b"ab", None, {"loss": "ab"}, (True, 1.0), (1.0, np.bool_(False)), (1.0, None), (1.0, "2"), True],
    ids=repr,
)
def test_not_numbers_raise_type_error(result):
    with pytest.raises(TypeError, match="loss_fn returned"):
        Objectives.of(2).interpret(result)


def test_a_non_numeric_metric_raises_type_error():
    with pytest.raises(TypeError, match="'note'"):
        Objectives.of(["a", "b"]).interpret({"a": 1.0, "b": 2.0, "note": "fine"})


# ---------------------------------------------------------------------------------------------------------
# pareto_ranks
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("m", [2, 3, 4])
def test_ranks_match_brute_force_with_ties_and_duplicates(m, seed):
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 4, size=(50, m)).astype(float)  # many ties and repeated points
    fine = rng.random((30, m))
    for points in (coarse, fine, np.vstack([fine, fine[:5]])):
        np.testing.assert_array_equal(pareto_ranks(points), brute_force_ranks(points))


def random_points(seed: int, m: int, specials: Sequence[float]) -> np.ndarray:
    """40 points on a coarse grid, about 10 % of each objective's values replaced by each of ``specials``."""
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 5, size=(40, m)).astype(float)
    for column in range(m):
        for special in specials:
            points[rng.random(40) < 0.1, column] = special
    return points


@pytest.mark.parametrize(
    ("m", "specials"),
    [(2, [np.nan, np.inf, -np.inf]), (4, [np.nan, np.inf]), (5, [np.nan, np.inf, -np.inf])],
)
def test_nan_counts_as_inf(m, specials):
    equal = np.zeros((2, m))
    equal[:, 0] = np.inf, np.nan
    assert pareto_ranks(equal).tolist() == [0, 0]
    for seed in range(5):
        points = random_points(seed, m, specials)
        np.testing.assert_array_equal(pareto_ranks(points), brute_force_ranks(points), f"seed {seed}")


def test_three_objectives_with_inf_or_nan_rank_as_brute_force():
    # With three objectives moocore 0.3.2's pareto_rank ranks some points with an inf as dominated when
    # they are not: pareto_ranks hands it the largest finite numbers instead. Neither point of each pair
    # dominates the other: the second is better in the first objective, the first in the second.
    assert pareto_ranks([[np.inf, 0.0, 1.0], [1.0, 3.0, 0.0]]).tolist() == [0, 0], "neither dominates"
    assert pareto_ranks([[np.nan, 0.0, 1.0], [1.0, 3.0, 0.0]]).tolist() == [0, 0], "neither dominates"
    for seed in range(5):
        points = random_points(seed, 3, [np.nan, np.inf])
        np.testing.assert_array_equal(pareto_ranks(points), brute_force_ranks(points), f"seed {seed}")


MINUS_INF = """
import numpy as np
from propulate.objectives import hypervolume, pareto_ranks
print(pareto_ranks([[0.0, -np.inf, 1.0], [1.0, 3.0, 0.0]]).tolist(), flush=True)
print(hypervolume([[-np.inf, 0.5, 0.5]], [1.0, 1.0, 1.0]), flush=True)
"""


def test_minus_inf_in_three_objectives_does_not_crash():
    # moocore 0.3.2 crashes the process (segmentation fault) on -inf with three objectives, a value that a
    # run with accept_inf=True keeps (a maximized objective at inf). In a subprocess, so that a crash fails
    # this test only.
    done = subprocess.run([sys.executable, "-c", MINUS_INF], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"exit status {done.returncode} (-11: segmentation fault): {done.stdout!r}"
    # Neither point dominates the other (the first is better in the first two objectives, the second in
    # the third); the box of the point at -inf is infinite, as with two objectives.
    assert done.stdout.split("\n")[:2] == ["[0, 0]", "inf"]
    assert hypervolume([[-np.inf, 0.5]], [1.0, 1.0]) == np.inf


def test_equal_points_share_a_rank():
    assert pareto_ranks([[1.0, 1.0]] * 3).tolist() == [0, 0, 0]
    assert pareto_ranks([[2.0, 2.0], [1.0, 1.0], [2.0, 2.0]]).tolist() == [1, 0, 1]


def test_one_objective_ranks_by_value():
    assert pareto_ranks([[3.0], [1.0], [2.0], [1.0]]).tolist() == [2, 0, 1, 0]


def test_no_points_no_ranks():
    ranks = pareto_ranks(np.empty((0, 2)))
    assert ranks.shape == (0,)
    assert ranks.dtype == np.int64


@pytest.mark.parametrize("points", [[1.0, 2.0], np.zeros((2, 2, 2)), 3.0], ids=["1-D", "3-D", "scalar"])
def test_ranks_need_a_matrix(points):
    with pytest.raises(ValueError, match=r"points: expected an array of shape \(n, M\)"):
        pareto_ranks(points)


# ---------------------------------------------------------------------------------------------------------
# crowding_distance
# ---------------------------------------------------------------------------------------------------------


def test_crowding_on_a_line_by_hand():
    # x = 0, 1, 4, 10 on y = 10 - x, shuffled; range 10 in both objectives. Point x = 1: (4 - 0) / 10 in
    # each objective; x = 4: (10 - 1) / 10 in each.
    points = [[4.0, 6.0], [0.0, 10.0], [10.0, 0.0], [1.0, 9.0]]
    np.testing.assert_allclose(crowding_distance(points), [1.8, np.inf, np.inf, 0.8])


def test_evenly_spaced_points_are_equally_crowded():
    np.testing.assert_allclose(
        crowding_distance([[0.0, 3.0], [1.0, 2.0], [2.0, 1.0], [3.0, 0.0]]), [np.inf, 4 / 3, 4 / 3, np.inf]
    )


@pytest.mark.parametrize("n", [0, 1, 2])
def test_up_to_two_points_are_all_extremes(n):
    distance = crowding_distance(np.arange(2.0 * n).reshape(n, 2))
    assert distance.shape == (n,)
    assert np.all(np.isinf(distance))


def test_an_objective_without_range_adds_nothing():
    # The second objective is the same everywhere: only the first spreads the points (range 4).
    distance = crowding_distance([[0.0, 5.0], [1.0, 5.0], [3.0, 5.0], [4.0, 5.0]])
    np.testing.assert_allclose(distance, [np.inf, 3 / 4, 3 / 4, np.inf])


def test_identical_points_give_no_nan():
    distance = crowding_distance([[1.0, 1.0]] * 4)
    assert not np.any(np.isnan(distance))
    assert np.isinf(distance).sum() == 2


@pytest.mark.parametrize("seed", range(3))
def test_crowding_per_front_is_that_of_each_front_alone(seed):
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 6, size=(40, 3)).astype(float)
    ranks = pareto_ranks(points)
    distance = crowding_distance(points, ranks)
    for rank in np.unique(ranks):
        front = ranks == rank
        np.testing.assert_allclose(distance[front], crowding_distance(points[front]), err_msg=f"rank {rank}")


# ---------------------------------------------------------------------------------------------------------
# hypervolume
# ---------------------------------------------------------------------------------------------------------


def test_hypervolume_of_one_point():
    assert hypervolume([[0.5, 0.25]], (1.0, 1.0)) == pytest.approx(0.375)
    assert hypervolume([[0.5, 0.5, 0.5]], (1.0, 2.0, 3.0)) == pytest.approx(0.5 * 1.5 * 2.5)


def test_hypervolume_of_a_staircase():
    # Up to (3, 3): heights 1, 2 and 3 over x in [0, 1), [1, 2) and [2, 3).
    assert hypervolume([[0.0, 2.0], [1.0, 1.0], [2.0, 0.0]], [3.0, 3.0]) == pytest.approx(6.0)


def test_hypervolume_of_two_overlapping_boxes():
    # [0, 2] x [1, 2] x [1, 2] (volume 2) and [1, 2] x [0, 2] x [0, 2] (4) share [1, 2]^3 (1): 2 + 4 - 1.
    assert hypervolume([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]], [2.0, 2.0, 2.0]) == pytest.approx(5.0)


def test_dominated_and_outside_points_add_nothing():
    base = hypervolume([[0.0, 2.0], [1.0, 1.0], [2.0, 0.0]], [3.0, 3.0])
    more = [[0.0, 2.0], [1.0, 1.0], [2.0, 0.0], [2.0, 2.0], [1.0, 1.0], [4.0, -1.0], [3.0, 0.0], [np.nan, 0]]
    assert hypervolume(more, [3.0, 3.0]) == pytest.approx(base)
    assert hypervolume([[4.0, 0.0], [0.0, 3.0]], [3.0, 3.0]) == 0.0
    assert hypervolume(np.empty((0, 2)), [1.0, 1.0]) == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_hypervolume_matches_a_sweep_in_two_dimensions(seed):
    points = np.random.default_rng(seed).random((25, 2))
    reference = (1.0, 1.0)
    # Sweep over the first objective: each strip up to the next point is as high as the best second
    # objective seen so far.
    ordered = points[np.argsort(points[:, 0])]
    edges = [*ordered[:, 0], reference[0]]
    best = np.minimum.accumulate(ordered[:, 1])
    swept = sum((edges[i + 1] - edges[i]) * (reference[1] - best[i]) for i in range(len(ordered)))
    assert hypervolume(points, reference) == pytest.approx(swept)


@pytest.mark.parametrize("reference", [(1.0,), (1.0, 1.0, 1.0)])
def test_hypervolume_needs_one_reference_value_per_objective(reference):
    with pytest.raises(ValueError, match="reference"):
        hypervolume([[0.5, 0.5]], reference)


# ---------------------------------------------------------------------------------------------------------
# pareto_front
# ---------------------------------------------------------------------------------------------------------


def test_front_keeps_completed_non_dominated_individuals_in_order():
    c = individual(2.0, (1.0, 1.0))
    a = individual(0.0, (0.0, 3.0))
    dominated = individual(1.0, (2.0, 2.0))
    failed = individual(3.0, None, Status.FAILED)
    pruned = individual(3.5, (-1.0, -1.0), Status.PRUNED)  # an interim loss: not comparable
    b = individual(4.0, (3.0, 0.0))
    front = pareto_front([c, dominated, failed, a, pruned, b])
    assert [ind.params()["x"] for ind in front] == [2.0, 0.0, 4.0]
    assert front[0] is c


def test_front_counts_copies_once_but_keeps_equal_losses_elsewhere():
    a = individual(0.0, (1.0, 1.0))
    twin = a.copy()  # a migrant: same parameters, same losses
    elsewhere = individual(1.0, (1.0, 1.0))  # same losses, other parameters
    front = pareto_front([a, twin, elsewhere])
    assert front == [a, elsewhere] and front[0] is a


def test_front_of_single_loss_individuals_is_the_best():
    a, b = individual(0.0, None), individual(1.0, None)
    a.loss, b.loss = 2.0, 1.0
    a.status = b.status = Status.COMPLETED
    assert pareto_front([a, b]) == [b]


def test_front_of_nothing_completed_is_empty():
    assert pareto_front([]) == []
    assert pareto_front([individual(0.0, None, Status.FAILED)]) == []


# ---------------------------------------------------------------------------------------------------------
# Individual.losses
# ---------------------------------------------------------------------------------------------------------


def test_losses_survive_copies_pickling_and_messages():
    ind = individual(1.5, (0.25, -0.75))
    assert Individual({"x": 1.0, "act": "relu"}, LIMITS).losses is None
    twins = [
        ind.copy(),
        pickle.loads(pickle.dumps(ind)),
        individual_module.unpack(ind.space, *ind.packed()),
    ]
    for twin in twins:
        assert twin.losses == (0.25, -0.75)
        assert isinstance(twin.losses, tuple)
        assert twin.equals(ind)


def test_child_forgets_losses():
    assert individual(1.5, (0.25, -0.75)).child().losses is None


def test_equals_compares_losses_nan_equal_to_nan():
    a = individual(1.0, (0.5, math.nan))
    assert a.equals(individual(1.0, (0.5, math.nan)))
    assert not a.equals(individual(1.0, (0.5, 1.0)))
    assert not a.equals(individual(1.0, (0.5, math.nan, 0.0)))
    single = individual(1.0, (0.5, math.nan))
    single.losses = None
    assert not a.equals(single)
    assert not single.equals(a)


def test_repr_shows_losses():
    text = repr(individual(1.0, (0.25, -0.75)))
    assert "losses=(0.25, -0.75)" in text
    assert "loss=" not in text
    single = individual(1.0, None)
    single.loss = 0.25
    assert "loss=0.25," in repr(single)


# ---------------------------------------------------------------------------------------------------------
# Evaluator with objectives
# ---------------------------------------------------------------------------------------------------------


def evaluate(loss_fn, objectives, **kwargs):
    evaluator = Evaluator(loss_fn, MPI.COMM_SELF, objectives=Objectives.of(objectives), **kwargs)
    return evaluator(individual(1.0, None, Status.PENDING))


def test_evaluation_keeps_every_objective_and_the_first_as_loss():
    outcome = evaluate(lambda p: {"acc": 0.9, "err": p["x"] / 4, "epochs": 3}, ERR_ACC)
    assert outcome.status is Status.COMPLETED
    assert outcome.losses == (0.25, -0.9)
    assert outcome.loss == 0.25
    assert outcome.metrics == {"epochs": 3.0}


def test_a_generator_reports_its_last_objectives():
    def curve(params):
        for k in range(3):
            yield (1.0 / (k + 1), float(k))

    outcome = evaluate(curve, 2)
    assert outcome.status is Status.COMPLETED
    assert outcome.losses == (1 / 3, 2.0)
    assert outcome.steps == 3


def test_another_count_fails_the_evaluation_saying_why():
    outcome = evaluate(lambda p: (1.0, 2.0, 3.0), ERR_ACC)
    assert outcome.status is Status.FAILED
    assert "returned 3 objective value(s)" in outcome.error
    assert "['err', 'acc']" in outcome.error


def test_a_string_fails_the_evaluation():
    outcome = evaluate(lambda p: "0.1, 0.2", 2)
    assert outcome.status is Status.FAILED
    assert "TypeError" in outcome.error


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_unusable_values_in_any_objective_fail_the_evaluation(bad):
    outcome = evaluate(lambda p: {"err": 0.5, "acc": bad}, ERR_ACC)
    assert outcome.status is Status.FAILED
    assert f"objective values (0.5, {bad})" in outcome.error  # as the loss function returned them


def test_infinite_objectives_are_accepted_on_request():
    assert evaluate(lambda p: (0.5, math.inf), 2, accept_inf=True).status is Status.COMPLETED
    assert evaluate(lambda p: (0.5, math.nan), 2, accept_inf=True).status is Status.FAILED


# ---------------------------------------------------------------------------------------------------------
# SelectParetoBest / SelectParetoWorst
# ---------------------------------------------------------------------------------------------------------


def hand_made() -> dict[str, Individual]:
    """Rank 0: a, d (extremes), c (crowding 1.5), b (1.25); rank 1: e, f (two points); rank 2: g."""
    losses = {
        "g": (5.0, 5.0),
        "b": (1.0, 3.0),
        "e": (2.0, 4.0),
        "a": (0.0, 4.0),
        "c": (2.0, 1.0),
        "f": (5.0, 1.0),
        "d": (4.0, 0.0),
    }
    return {name: individual(i / 2, value) for i, (name, value) in enumerate(losses.items())}


def names(chosen: list[Individual], inds: dict[str, Individual]) -> str:
    return "".join(next(name for name, ind in inds.items() if ind is c) for c in chosen)


def test_hand_made_ranks_and_crowding():
    points = [ind.losses for ind in hand_made().values()]
    assert pareto_ranks(points).tolist() == [2, 0, 1, 0, 0, 1, 0]
    front = [points[i] for i in (1, 3, 4, 6)]  # b, a, c, d
    np.testing.assert_allclose(crowding_distance(front), [1.25, np.inf, 1.5, np.inf])


def test_select_pareto_best_takes_low_ranks_then_large_crowding():
    inds = hand_made()
    assert names(SelectParetoBest(7)(list(inds.values())), inds) == "adcbefg"
    assert names(SelectParetoBest(3)(list(inds.values())), inds) == "adc"


def test_select_pareto_worst_is_the_reverse():
    inds = hand_made()
    assert names(SelectParetoWorst(7)(list(inds.values())), inds) == "gfebcda"
    assert names(SelectParetoWorst(2)(list(inds.values())), inds) == "gf"


def test_pareto_selections_return_the_individuals_themselves():
    inds = list(hand_made().values())
    assert all(any(c is ind for ind in inds) for c in SelectParetoBest(3)(inds))


@pytest.mark.parametrize("select", [SelectParetoBest, SelectParetoWorst])
def test_pareto_selections_refuse_more_than_given(select):
    with pytest.raises(ValueError, match="select 8 of only 7"):
        select(8)(list(hand_made().values()))
    with pytest.raises(ValueError, match="offspring"):
        select(0)


# ---------------------------------------------------------------------------------------------------------
# to_dataframe
# ---------------------------------------------------------------------------------------------------------


def exported(losses: tuple[float, ...] | None, status: Status, uid: int) -> Individual:
    ind = individual(float(uid), losses, status)
    ind.uid, ind.island, ind.rank, ind.generation = uid, 0, 0, uid
    ind.migration_history = "0"
    ind.evaltime, ind.evalperiod = T0 + uid + 1.0, 1.0
    return ind


def run_with_two_objectives() -> list[Individual]:
    return [
        exported((0.1, -0.9), Status.COMPLETED, 0),
        exported((0.5, math.nan), Status.FAILED, 1),
        exported((0.3, -0.7), Status.PRUNED, 2),
        exported(None, Status.FAILED, 3),  # the loss function raised
    ]


def test_dataframe_has_a_column_per_objective_as_returned():
    frame = to_dataframe(run_with_two_objectives(), objectives=ERR_ACC)
    assert "value" not in frame.columns
    assert [c for c in frame.columns if c.startswith("value")] == ["values_0", "values_1"]
    np.testing.assert_array_equal(frame["values_0"], [0.1, np.nan, 0.3, np.nan])
    np.testing.assert_array_equal(frame["values_1"], [0.9, np.nan, 0.7, np.nan])
    assert frame["state"].tolist() == ["COMPLETE", "FAIL", "PRUNED", "FAIL"]


def test_dataframe_takes_described_objectives():
    frame = to_dataframe(run_with_two_objectives(), objectives=Objectives.of(ERR_ACC).describe())
    np.testing.assert_array_equal(frame["values_1"], [0.9, np.nan, 0.7, np.nan])


def test_dataframe_infers_the_count_from_the_losses():
    frame = to_dataframe(run_with_two_objectives())
    assert "value" not in frame.columns
    np.testing.assert_array_equal(frame["values_1"], [-0.9, np.nan, -0.7, np.nan])  # as stored: minimized


def test_dataframe_of_one_loss_keeps_value():
    ind = exported(None, Status.COMPLETED, 0)
    ind.loss = 0.5
    frame = to_dataframe([ind])
    assert frame["value"].tolist() == [0.5]
    assert not any(c.startswith("values_") for c in frame.columns)


# ---------------------------------------------------------------------------------------------------------
# RunResults
# ---------------------------------------------------------------------------------------------------------


def test_front_is_handed_out_as_copies():
    a, b = individual(0.0, (0.0, 1.0)), individual(1.0, (1.0, 0.0))
    results = RunResults([a], {Status.COMPLETED: 2}, front=[a, b])
    assert results.multi_objective
    front = results.front
    assert all(x.equals(y) and x is not y for x, y in zip(front, [a, b], strict=True))
    front[0].losses = (9.0, 9.0)
    assert results.front[0].losses == (0.0, 1.0)


def test_a_multi_objective_run_has_no_single_best():
    a = individual(0.0, (0.0, 1.0))
    results = RunResults([a], {Status.COMPLETED: 1}, front=[a])
    with pytest.raises(NoResultError, match="pareto_front"):
        results.best  # noqa: B018
    with pytest.raises(NoResultError, match="pareto_front"):
        results.top(1)


def test_a_single_loss_run_has_no_front():
    a = individual(0.0, None)
    a.loss = 1.0
    results = RunResults([a], {Status.COMPLETED: 1})
    assert not results.multi_objective
    assert results.best.equals(a)
    with pytest.raises(NoResultError, match="one loss"):
        results.front  # noqa: B018


def test_an_empty_front_says_nothing_completed():
    results = RunResults([], {Status.FAILED: 3}, front=[])
    with pytest.raises(NoResultError, match="0 completed, 3 failed"):
        results.front  # noqa: B018


def test_gathered_front_is_sorted_by_the_first_objective():
    rng = random.Random(0)
    members = [individual(i / 10, (rng.random(), rng.random())) for i in range(30)]
    results = gather_results(members, MPI.COMM_SELF, lambda request: request.Wait(), multi_objective=True)
    front = results.front
    expected = sorted(pareto_front(members), key=lambda ind: ind.losses)
    assert [ind.losses for ind in front] == [ind.losses for ind in expected]


@pytest.mark.parametrize("returned", [(0.5, 2.0), [0.5, 2.0, 3.0], np.array([0.5, 2.0])])
def test_several_values_without_objectives_name_the_argument(returned):
    # A run with one loss whose loss function returns several values: the evaluation fails with a message
    # that says how to declare them, not only that a number was expected.
    from propulate.evaluation import interpret

    with pytest.raises(TypeError, match=rf"returned {len(returned)} values; .* objectives={len(returned)}"):
        interpret(returned)
