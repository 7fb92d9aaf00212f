"""CMA-ES on one process: the serial strategy (samples follow the learned covariance, offspring stay in
bounds, updates equal ``cmaes.CMA.tell``), and the asynchronous island driven as the loop drives it
(``bind``, ``observe``, a call per breeding) by a small event-driven simulation: the workers' copies of the
strategy stay identical, late arrivals are held back, injected results are clipped, the state stays bounded
and a resume learns what the snapshot missed.

A run's outcome depends on how the CPU's BLAS kernel rounds (the eigen decomposition, the products), so a
test of an outcome asserts on the median over ``SEEDS``, with a threshold that separates the design from its
alternative. Serial runs, medians over ``SEEDS`` under four OpenBLAS kernels (evaluations until the best loss
is below 1e-8): ellipsoid 5,500 to 5,900 (basic) and 3,964 (active), Rosenbrock 6,000 to 6,300 (basic) and
5,500 to 5,650 (active); ``cmaes`` needs 4,090 to 4,110 and 5,000 to 5,500. With an unadapted covariance
matrix the best loss is still above 1 (ellipsoid) and 1e-3 (Rosenbrock) after 100,000 evaluations.
"""

from __future__ import annotations

import copy
import functools
import heapq
import math
import pickle
import random
import statistics

import numpy as np
import pytest

from propulate.individual import Individual, Status
from propulate.propagators.cmaes import TAG, ActiveCMA, BasicCMA, CMAAdapter, CMAParameter, CMAPropagator

N_DIMS = 10
BUDGET = 10_000  # evaluations allowed to reach a loss below 1e-8
TARGET = 1e-8
SEEDS = range(5)  # the seeds of every test of an outcome; each asserts on their median


def ellipsoid(x: np.ndarray) -> float:
    return float(np.sum(10.0 ** (6.0 * np.arange(x.size) / (x.size - 1)) * x**2))


def rosenbrock(x: np.ndarray) -> float:
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


FUNCTIONS = {"ellipsoid": (ellipsoid, 5.12), "rosenbrock": (rosenbrock, 2.048)}


def box(bound: float, n: int = N_DIMS) -> dict[str, tuple[float, float]]:
    return {f"x{i}": (-bound, bound) for i in range(n)}


def evaluated(ind: Individual, loss: float, uid: int, evaltime: float | None = None) -> Individual:
    ind.loss, ind.status, ind.uid = loss, Status.COMPLETED, uid
    ind.evaltime = float(uid if evaltime is None else evaltime)
    return ind


def ask_tell(propagator: CMAPropagator, function, budget: int) -> tuple[int, float]:
    """One worker, as the loop drives it; return (evaluations, best loss)."""
    best = math.inf
    for i in range(budget):
        ind = propagator([])[0]
        propagator.observe(evaluated(ind, function(ind.position), i))
        best = min(best, ind.loss)
        if best < TARGET:
            return i + 1, best
    return budget, best


@functools.cache
def serial_runs(name: str, adapter: type[CMAAdapter]) -> tuple[float, ...]:
    """Evaluations one worker needs to reach ``TARGET`` from each seed (inf: not within ``BUDGET``)."""
    function, bound = FUNCTIONS[name]
    runs = []
    for seed in SEEDS:
        propagator = CMAPropagator(adapter(), box(bound), rng=random.Random(seed))
        evaluations, best = ask_tell(propagator, function, BUDGET)
        runs.append(evaluations if best < TARGET else math.inf)
    return tuple(runs)


def untagged(ind: Individual) -> Individual:
    """The individual as a checkpoint restores it: parameters, loss and provenance, no extra attributes."""
    copy = Individual(ind.position, ind.space)
    return evaluated(copy, ind.loss, ind.uid, ind.evaltime)


def simulate(
    propagators: list[CMAPropagator], function, evaluations: int, seed: int, lag: float = 0.0
) -> list[Individual]:
    """An island of workers in simulated time, as ``benchmarks/island_sim.py`` (lognormal times, median 1).

    A worker observes its own result when it ends, takes in the results that reached it meanwhile (each
    reaches the others a time uniform in [0, ``lag``] after it ended), then breeds. Returns the individuals
    in the order they ended.
    """
    rng = np.random.default_rng(seed)
    size = len(propagators)
    for rank, propagator in enumerate(propagators):
        propagator.bind(rank, size)
    events: list[tuple[float, int, int, Individual]] = []  # (time, order, rank, individual); rank -1: sent
    inboxes: list[list[Individual]] = [[] for _ in range(size)]
    ended: list[Individual] = []
    started = 0

    def breed(rank: int, now: float) -> None:
        nonlocal started
        ind = propagators[rank]([])[0]
        ind.uid, ind.rank, ind.evalperiod = started, rank, rng.lognormal(0.0, 0.5)
        started += 1
        heapq.heappush(events, (now + ind.evalperiod, ind.uid, rank, ind))

    for rank in range(size):
        breed(rank, 0.0)
    while events:
        now, order, rank, ind = heapq.heappop(events)
        if rank < 0:  # a result reaching the others
            for other in range(size):
                if other != ind.rank:
                    inboxes[other].append(ind)
            continue
        ind.loss, ind.status, ind.evaltime = function(ind.position), Status.COMPLETED, now
        ended.append(ind)
        propagators[rank].observe(ind)
        if lag > 0.0:
            heapq.heappush(events, (now + rng.uniform(0.0, lag), order, -1, ind))
        else:
            for other in range(size):
                if other != rank:
                    inboxes[other].append(ind)
        for arrived in inboxes[rank]:
            propagators[rank].observe(arrived)
        inboxes[rank].clear()
        if started < evaluations:
            breed(rank, now)
    return ended


class Recording(CMAPropagator):
    """Remembers the strategy after every update, to compare the workers' copies generation by generation."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.trajectory: dict[int, bytes] = {}

    def _tell(self, *args) -> None:
        super()._tell(*args)
        par = self.par
        self.trajectory[par.generation] = pickle.dumps((par.mean, par.sigma, par.C, par.p_sigma, par.p_c))


# ---------------------------------------------------------------------------------------------------------
# The serial strategy
# ---------------------------------------------------------------------------------------------------------


def test_samples_follow_the_learned_covariance():
    n = 3
    propagator = CMAPropagator(BasicCMA(), box(1.0e6, n), rng=1)  # a box so wide that no sample is repaired
    par = propagator.par
    a = np.array([[2.0, 0.6, -0.3], [0.6, 1.0, 0.4], [-0.3, 0.4, 0.5]])
    par.C, par.sigma, par.mean = a, 0.01, np.full(n, 0.1)
    par.decompose()
    xs = np.array([propagator([])[0].position for _ in range(20_000)])
    unit = (xs - propagator.center) / propagator.width
    empirical = np.cov(unit.T)
    expected = par.sigma**2 * a
    # Standard error of a covariance entry: sqrt((s_ii s_jj + s_ij^2) / m); allow 5 of them.
    tolerance = 5 * np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / len(xs))
    assert np.all(np.abs(empirical - expected) < tolerance), (empirical, expected)
    assert abs(np.corrcoef(unit.T)[0, 1] - 0.6 / math.sqrt(2.0)) < 0.03
    assert np.allclose(unit.mean(axis=0), 0.1, atol=5 * 0.01 * math.sqrt(2.0 / len(xs)))


@pytest.mark.parametrize("adapter", [BasicCMA, ActiveCMA])
def test_offspring_stay_inside_the_limits(adapter):
    limits = {"a": (-1.0, 1.0), "b": (0.0, 1e-3), "c": (10.0, 20.0)}
    propagator = CMAPropagator(adapter(), limits, pop_size=6, rng=random.Random(3))
    propagator.bind(0, 4)  # the offspring are drawn ahead of the mean, too
    propagator.par.sigma = 5.0  # far larger than the box: most samples need the boundary rule
    for i in range(300):
        ind = propagator([])[0]
        assert np.all(ind.position >= propagator.space.lower) and np.all(
            ind.position <= propagator.space.upper
        )
        propagator.observe(evaluated(ind, float(np.sum(ind.position**2)), i))


def test_state_dict_round_trip_gives_identical_samples():
    limits = box(5.12, 4)
    first = CMAPropagator(ActiveCMA(), limits, rng=random.Random(7))
    inds = []
    for i in range(43):
        ind = first([])[0]
        first.observe(evaluated(ind, ellipsoid(ind.position), i))
        inds.append(ind)
    state = pickle.loads(pickle.dumps(first.state_dict()))  # as the checkpoint stores it
    saved_c, saved_mean = state["par"]["C"].copy(), state["par"]["mean"].copy()
    second = CMAPropagator(ActiveCMA(), limits, rng=random.Random(99))
    second.load_state_dict(state)
    for i in range(43, 83):
        a, b = first([])[0], second([])[0]
        np.testing.assert_array_equal(a.position, b.position)
        first.observe(evaluated(a, ellipsoid(a.position), i))
        second.observe(evaluated(b, ellipsoid(b.position), i))
    # lambda = 8 in 4-D: 42 results learned before the snapshot (the 43rd is learned at the next call).
    assert state["par"]["generation"] == 5 and first.par.generation == second.par.generation == 10
    np.testing.assert_array_equal(state["par"]["C"], saved_c)
    np.testing.assert_array_equal(state["par"]["mean"], saved_mean)
    assert not np.array_equal(first.par.C, saved_c)


def test_inputs_and_global_random_state_are_untouched():
    random.seed(5)
    np.random.seed(5)  # noqa: NPY002 (the legacy global state must stay untouched)
    before = (random.getstate(), np.random.get_state()[1].copy())  # noqa: NPY002
    propagator = CMAPropagator(BasicCMA(), box(1.0, 2), pop_size=4, rng=0)
    inds = [evaluated(propagator([])[0], float(i), i) for i in range(4)]
    positions = [ind.position.copy() for ind in inds]
    out = propagator(inds)  # a population passed by hand is learned from, not modified
    assert propagator.par.generation == 1
    assert len(out) == 1 and all(o is not i for o in out for i in inds)
    assert all(np.array_equal(p, ind.position) for p, ind in zip(positions, inds, strict=True))
    assert random.getstate() == before[0] and np.array_equal(np.random.get_state()[1], before[1])  # noqa: NPY002


def test_updates_once_per_lambda_results_learned_at_the_next_call():
    propagator = CMAPropagator(BasicCMA(), box(1.0, 2), pop_size=5, rng=0)
    assert propagator.breeding_pool == 0 and propagator.observes
    for i in range(14):
        propagator.observe(evaluated(propagator([])[0], float(i), i))
    assert propagator.par.generation == 2  # after 5 and 10 results; 3 are collected and 1 waits
    propagator.observe(evaluated(propagator([])[0], 0.0, 14))
    assert propagator.par.generation == 2
    propagator([])
    assert propagator.par.generation == 3


def test_failed_and_unevaluated_results_teach_nothing():
    propagator = CMAPropagator(BasicCMA(), box(1.0, 2), pop_size=4, rng=0)
    for i, status in enumerate([Status.FAILED, Status.INTERRUPTED, Status.PENDING] * 4):
        ind = evaluated(propagator([])[0], 1.0, i)
        ind.status = status
        propagator.observe(ind)
    nan = evaluated(propagator([])[0], math.nan, 99)
    propagator.observe(nan)
    propagator([])
    assert propagator.par.generation == 0
    for i in range(4):  # a pruned result counts, with its last interim loss
        ind = evaluated(propagator([])[0], float(i), 100 + i)
        ind.status = Status.PRUNED
        propagator.observe(ind)
    propagator([])
    assert propagator.par.generation == 1


@pytest.mark.parametrize(
    "limits", [{"x": (0.0, 1.0), "n": (1, 5)}, {"x": (0.0, 1.0), "c": ("a", "b")}], ids=["int", "categorical"]
)
def test_non_float_parameters_are_rejected(limits):
    with pytest.raises(ValueError, match="limits"):
        CMAPropagator(BasicCMA(), limits)


def test_weights_and_learning_rates_follow_hansen():
    par = CMAParameter(10, 10, np.zeros(10), 0.3, ActiveCMA())
    assert par.mu == 5 and math.isclose(np.sum(par.weights[:5]), 1.0)
    assert np.all(np.diff(par.weights) < 0) and np.all(par.weights[5:] < 0)
    assert 0 < par.c_1 + par.c_mu <= 1 and 0 < par.c_sigma < 1 and par.d_sigma > 1
    assert np.all(BasicCMA().negative_weights(-np.ones(3), 10, 3.0, 0.1, 0.1) == 0)


def test_updates_equal_cmaes_tell():
    """One worker fed the samples of ``cmaes.CMA`` learns what ``CMA.tell`` learns, to rounding."""
    cmaes = pytest.importorskip("cmaes")
    n, lambda_, width = 6, 8, 100.0
    propagator = CMAPropagator(
        ActiveCMA(), box(width / 2, n), decompose_in_each_generation=True, pop_size=lambda_, rng=3
    )
    par = propagator.par
    reference = cmaes.CMA(mean=par.mean * width, sigma=par.sigma * width, population_size=lambda_, seed=1)
    uid = 0
    for _ in range(40):
        told = []
        for _ in range(lambda_):
            x = reference.ask()
            ind = propagator([])[0]  # tagged: drawn from the current distribution
            ind.position = x.copy()
            told.append((x, ellipsoid(x)))
            propagator.observe(evaluated(ind, told[-1][1], uid))
            uid += 1
        reference.tell(told)
        propagator([])
        par = propagator.par
        # The means agree to rounding (measured: 3e-16). ``cmaes`` adds 1e-8 to ||C^(-1/2) y||^2 in
        # eq. (46), so the rest agrees to about 1e-9 (measured over these 40 generations: at most 4e-9).
        np.testing.assert_allclose(par.mean * width, reference._mean, rtol=1e-14, atol=1e-14 * width)
        assert math.isclose(par.sigma * width, reference._sigma, rel_tol=2e-8)
        scale = {"C": np.max(np.abs(par.C)), "p": np.max(np.abs(par.p_sigma)) + np.max(np.abs(par.p_c))}
        np.testing.assert_allclose(par.C, reference._C, rtol=0, atol=2e-8 * scale["C"])
        np.testing.assert_allclose(par.p_sigma, reference._p_sigma, rtol=0, atol=2e-8 * scale["p"])
        np.testing.assert_allclose(par.p_c, reference._pc, rtol=0, atol=2e-8 * scale["p"])
    assert par.generation == 40


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [BasicCMA, ActiveCMA])
@pytest.mark.parametrize("name", ["ellipsoid", "rosenbrock"])
def test_reaches_target_within_budget(name, adapter):
    # On Rosenbrock a run may settle in the local minimum (f = 3.99), as synchronous CMA-ES does: seeds 0-39
    # under four BLAS kernels, 1 to 3 runs of 40 of each adapter, 3 of ``cmaes``'s; on the ellipsoid none.
    runs = serial_runs(name, adapter)
    assert statistics.median(runs) <= BUDGET, f"{name}: evaluations to {TARGET:g} by seed: {runs}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ellipsoid", "rosenbrock"])
def test_not_ten_times_slower_than_the_cmaes_package(name):
    """Medians over ``SEEDS`` of the evaluations to ``TARGET``, ours over ``cmaes``'s: 0.96 to 0.97 on the
    ellipsoid, 1.02 to 1.12 on Rosenbrock under four BLAS kernels (the same strategy); an unadapted covariance
    matrix does not reach the target in 100,000 evaluations, more than 20 times ``cmaes``'s."""
    cmaes = pytest.importorskip("cmaes")
    function, bound = FUNCTIONS[name]
    theirs = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        optimizer = cmaes.CMA(
            mean=rng.uniform(-bound, bound, N_DIMS),
            sigma=0.3 * 2 * bound,
            bounds=np.array([[-bound, bound]] * N_DIMS),
            seed=seed,
        )
        evaluations, best = 0, math.inf
        while evaluations < BUDGET and best >= TARGET:
            told = []
            for _ in range(optimizer.population_size):
                x = optimizer.ask()
                told.append((x, function(x)))
                evaluations += 1
                best = min(best, told[-1][1])
            optimizer.tell(told)
        theirs.append(evaluations if best < TARGET else math.inf)
    ours = serial_runs(name, ActiveCMA)
    assert statistics.median(theirs) <= BUDGET, f"the reference did not converge within the budget: {theirs}"
    assert statistics.median(ours) <= 10 * statistics.median(theirs), (ours, theirs)


def test_a_population_passed_by_hand_is_learned_once():
    """Propulate 1.2.2's way (the whole population on every call) breeds what the loop's way breeds."""
    limits = box(2.048, 4)
    observing = CMAPropagator(ActiveCMA(), limits, rng=5)
    direct = CMAPropagator(ActiveCMA(), limits, rng=5)
    population: list[Individual] = []
    for i in range(100):
        a, b = observing([])[0], direct(population)[0]
        np.testing.assert_array_equal(a.position, b.position)
        observing.observe(evaluated(a, rosenbrock(a.position), i))
        population.append(evaluated(b, rosenbrock(b.position), i))
    assert observing.par.generation == direct.par.generation == 12


# ---------------------------------------------------------------------------------------------------------
# The asynchronous island
# ---------------------------------------------------------------------------------------------------------


def test_bind_sizes_the_generations_to_the_island():
    propagator = CMAPropagator(ActiveCMA(), box(1.0), rng=0)
    mean = propagator.par.mean.copy()
    assert propagator.par.lambda_ == 10  # 4 + floor(3 ln 10)
    propagator.bind(3, 4)
    assert propagator.par.lambda_ == 10
    propagator.bind(3, 16)
    assert propagator.par.lambda_ == 16 and propagator.par.mu == 8  # ceil(4 sqrt(16))
    propagator.bind(3, 64)
    assert propagator.par.lambda_ == 32
    np.testing.assert_array_equal(propagator.par.mean, mean)
    fixed = CMAPropagator(ActiveCMA(), box(1.0), pop_size=6, rng=0)
    fixed.bind(0, 16)
    assert fixed.par.lambda_ == 6


def test_the_island_shares_out_mirrored_orthogonal_directions():
    """Copies of one strategy on an island of 6 give workers 0 and 1, 2 and 3, 4 and 5 opposite unit
    directions, the three pairs orthogonal; a worker's second draw takes the next free slot (6 + rank);
    alone, or in the first generation, a worker draws independently."""
    alone = CMAPropagator(ActiveCMA(), box(5.12), rng=0)
    assert alone._shared_direction() is None
    ask_tell(alone, ellipsoid, 2 * alone.par.lambda_ + 1)
    generation = alone.par.generation
    assert generation == 2 and alone._shared_direction() is None
    copies = [copy.deepcopy(alone) for _ in range(6)]
    for rank, worker in enumerate(copies):
        worker.bind(rank, 6)
        worker.np_rng = np.random.default_rng(rank)  # the workers' own generators differ
    first = np.array([worker._shared_direction() for worker in copies])
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(first[0::2], -first[1::2], rtol=0, atol=0)
    gram = first[0::2] @ first[0::2].T
    np.testing.assert_allclose(gram, np.eye(3), atol=1e-12)
    second = copies[0]._shared_direction()  # slot 6: pair 3, the next column
    np.testing.assert_allclose(first[0::2] @ second, 0.0, atol=1e-12)
    # The offspring follows its direction: u - mean along B D d, with a length of its own.
    worker = copies[2]
    mean, sigma = np.zeros(N_DIMS), 1e-3  # inside the box: the first draw is taken
    direction = worker._shared_direction()
    par = worker.par
    u = (worker._sample(mean, sigma, direction) - worker.center) / worker.width
    along = par.B @ (par.D * direction)
    step = (u - mean) / sigma
    np.testing.assert_allclose(step, (step @ along) / (along @ along) * along, atol=1e-9)
    # A later generation has other directions.
    ask_tell(alone, ellipsoid, alone.par.lambda_)
    later = copy.deepcopy(alone)
    later.bind(0, 6)
    assert later.par.generation == 3
    assert abs(later._shared_direction() @ first[0]) < 1 - 1e-6


def test_offspring_carry_their_distribution_to_the_peers():
    propagator = CMAPropagator(ActiveCMA(), box(1.0, 3), rng=0)
    ind = propagator([])[0]
    generation, mean, sigma = getattr(ind, TAG)
    assert generation == 0 and sigma == propagator.par.sigma
    np.testing.assert_array_equal(mean, propagator.par.mean)
    travelled = ind.copy()  # what a peer unpacks from a message
    assert getattr(travelled, TAG)[0] == 0 and np.array_equal(getattr(travelled, TAG)[1], mean)


def test_offspring_are_drawn_from_the_distribution_predicted_for_the_end_of_their_evaluation():
    """Delay compensation: the mean moved ahead by the averaged shift, the step size changed by the averaged
    rate, for the updates during one evaluation; alone on its island a worker samples the current one."""
    single, island = (CMAPropagator(ActiveCMA(), box(1.0, 3), rng=0) for _ in range(2))
    island.bind(0, 9)  # lambda = ceil(4 sqrt(9)) = 12: 8 / 12 updates during one evaluation
    for propagator in (single, island):
        propagator.par.drift = np.array([1.0, -2.0, 0.5])
        propagator.par.sigma_trend = -0.3
    par = island.par
    _, mean, sigma = getattr(island([])[0], TAG)
    np.testing.assert_allclose(mean, par.mean + 8 / 12 * par.sigma * par.drift)
    assert sigma == pytest.approx(par.sigma * math.exp(-0.3 * 8 / 12))
    _, mean, sigma = getattr(single([])[0], TAG)
    np.testing.assert_array_equal(mean, single.par.mean)
    assert sigma == single.par.sigma


def test_the_predictions_average_the_mean_shifts_and_the_changes_of_the_step_size():
    """``drift`` averages the mean shifts (in step sizes) at the rate ``c_c / 2``, ``sigma_trend`` the
    logarithmic changes of the step size at the rate ``c_sigma``; both are checkpointed, and a state saved
    without them (before they existed) leaves them at zero."""
    propagator = CMAPropagator(ActiveCMA(), box(5.12, 4), rng=0)
    par = propagator.par
    means, sigmas = [par.mean.copy()], [par.sigma]
    drift, trend = np.zeros(4), 0.0
    for i in range(3 * par.lambda_):
        ind = propagator([])[0]
        propagator.observe(evaluated(ind, ellipsoid(ind.position), i))
        if i % par.lambda_ == par.lambda_ - 1:
            propagator([])  # learns the generation
            drift = (1 - par.c_c / 2) * drift + par.c_c / 2 * (par.mean - means[-1]) / sigmas[-1]
            trend = (1 - par.c_sigma) * trend + par.c_sigma * math.log(par.sigma / sigmas[-1])
            means.append(par.mean.copy())
            sigmas.append(par.sigma)
    assert par.generation == 3
    np.testing.assert_allclose(par.drift, drift, rtol=1e-12, atol=1e-15)
    assert par.sigma_trend == pytest.approx(trend, rel=1e-12) and trend != 0.0
    state = propagator.state_dict()
    restored = CMAPropagator(ActiveCMA(), box(5.12, 4), rng=1)
    restored.load_state_dict(state)
    np.testing.assert_array_equal(restored.par.drift, par.drift)
    assert restored.par.sigma_trend == par.sigma_trend
    old = CMAPropagator(ActiveCMA(), box(5.12, 4), rng=1)
    for key in ("drift", "sigma_trend"):
        del state["par"][key]
    old.load_state_dict(state)
    np.testing.assert_array_equal(old.par.drift, np.zeros(4))
    assert old.par.sigma_trend == 0.0 and old.par.generation == 3


@pytest.mark.slow
@pytest.mark.parametrize("lag", [0.0, 0.1], ids=["instant messages", "messages up to 10% of an evaluation"])
def test_the_workers_copies_of_the_strategy_stay_identical(lag):
    """Each worker holds back the results of the last 5 % of an evaluation time (``MARGIN``), its own
    included, so peers' results still on their way are learned in order."""
    workers = [Recording(ActiveCMA(), box(5.12), rng=random.Random(rank)) for rank in range(8)]
    simulate(workers, ellipsoid, 1500, seed=1, lag=lag)
    generations = [max(w.trajectory) for w in workers]
    assert min(generations) >= 1500 // 12 - 3  # about evaluations / lambda updates on every worker
    for generation in range(1, min(generations) + 1):
        assert len({w.trajectory[generation] for w in workers}) == 1, generation


@pytest.mark.slow
def test_copies_stay_close_when_messages_are_as_slow_as_evaluations():
    """Results that reach a worker after it learned later ones make its copy differ; the margin it holds
    back from then on grows to at most half an evaluation time. Seeds 0-3, 8 workers, messages taking up
    to one evaluation time: the copies' means part by at most 2.4 sigma, their step sizes by 24 %."""
    workers = [Recording(ActiveCMA(), box(5.12), rng=random.Random(rank)) for rank in range(8)]
    simulate(workers, ellipsoid, 1500, seed=1, lag=1.0)
    assert all(0.25 < w._margin <= 0.5 * w._period + 1e-12 for w in workers)
    for generation in range(1, min(max(w.trajectory) for w in workers) + 1):
        states = [pickle.loads(w.trajectory[generation]) for w in workers]
        mean, sigma, c = states[0][:3]
        whiten = np.linalg.inv(np.linalg.cholesky(c))
        assert max(np.linalg.norm(whiten @ (s[0] - mean)) / sigma for s in states) < 4.0, generation
        assert max(s[1] for s in states) / min(s[1] for s in states) < 1.6, generation


def test_a_late_result_is_learned_when_it_arrives_and_the_worker_holds_back_from_then_on():
    limits = box(1.0, 2)
    early, late = (CMAPropagator(ActiveCMA(), limits, pop_size=4, rng=0) for _ in range(2))
    for propagator in (early, late):
        propagator.bind(0, 2)
    results = [evaluated(Individual(np.full(2, 0.01 * i), limits), float(i), i, evaltime=i) for i in range(8)]
    for ind in results:
        early.observe(ind)
    early([])
    for ind in results[:5] + results[6:]:
        late.observe(ind)
    late([])  # results 0-4 and 6-7 learned: one generation (0-3), 4, 6 and 7 collected
    late.observe(results[5])
    assert early.par.generation == 2 and late.par.generation == 1
    next_result = evaluated(Individual(np.full(2, 0.5), limits), 0.0, 8, evaltime=8.0)
    late.observe(next_result)
    late([])  # result 5 is learned; result 8 ended within the margin (1.5 * 2 s) of the newest: held back
    assert late.par.generation == 2
    assert [r.uid for r in late._pending] == [8]


def test_injected_results_are_clipped_to_the_mahalanobis_length_of_hansen_2011():
    limits = box(1.0, 4)
    propagator = CMAPropagator(BasicCMA(), limits, pop_size=4, rng=0)
    propagator.bind(0, 1)
    par = propagator.par
    par.mean, par.sigma = np.zeros(4), 0.01
    mean_before, sigma = par.mean.copy(), par.sigma
    far = evaluated(Individual(np.full(4, 0.9), limits), -1.0, 0)  # the best loss, 90 sigma away
    far.migration_steps = 1  # an immigrant: its tag, if any, is not this island's
    setattr(far, TAG, (0, np.full(4, 0.45), 0.01))
    propagator.observe(far)
    own = [propagator([])[0] for _ in range(3)]
    for i, ind in enumerate(own):
        propagator.observe(evaluated(ind, float(i), i + 1))
    propagator([])
    clip = math.sqrt(4) + 2 * 4 / 6
    u_far = (far.position - propagator.center) / propagator.width
    clipped = mean_before + sigma * clip * (u_far - mean_before) / np.linalg.norm(u_far - mean_before) * 1.0
    points = [clipped] + [(ind.position - propagator.center) / propagator.width for ind in own[:1]]
    expected = par.weights[:2] @ np.array(points)
    np.testing.assert_allclose(par.mean, expected, rtol=1e-12)
    assert np.linalg.norm(par.mean - mean_before) / sigma < clip


def test_the_checkpointed_state_stays_small():
    propagator = CMAPropagator(ActiveCMA(), box(5.12), select_worst_all_time=True, rng=0)
    sizes = {}
    for i in range(3000):
        ind = propagator([])[0]
        propagator.observe(evaluated(ind, ellipsoid(ind.position), i))
        if i + 1 in (300, 3000):
            sizes[i + 1] = len(pickle.dumps(propagator.state_dict()))
    assert sizes[3000] <= 1.2 * sizes[300], sizes
    assert sizes[3000] < 20_000, sizes  # n = 10, lambda = 10: a few kB


def test_resume_learns_what_the_last_snapshot_missed():
    """The loop observes the restored population, then loads the last saved state: the results that ended
    after the snapshot are learned again, so the resumed worker continues where the lost one was."""
    limits = box(5.12, 4)
    original = CMAPropagator(ActiveCMA(), limits, rng=2)
    original.bind(0, 1)
    population = []
    for i in range(170):
        ind = original([])[0]
        original.observe(evaluated(ind, ellipsoid(ind.position), i))
        population.append(ind)
        if i == 149:
            snapshot = pickle.loads(pickle.dumps(original.state_dict()))
    resumed = CMAPropagator(ActiveCMA(), limits, rng=3)
    resumed.bind(0, 1)
    for ind in population:
        resumed.observe(ind)
    resumed.load_state_dict(snapshot)
    original([])
    resumed([])
    assert resumed.par.generation == original.par.generation == 21
    np.testing.assert_array_equal(resumed.par.mean, original.par.mean)
    np.testing.assert_array_equal(resumed.par.C, original.par.C)

    # Without tags (a checkpoint does not keep them) the missed results are injected: the same count.
    untagged_resume = CMAPropagator(ActiveCMA(), limits, rng=3)
    untagged_resume.bind(0, 1)
    for ind in population:
        untagged_resume.observe(untagged(ind))
    untagged_resume.load_state_dict(snapshot)
    untagged_resume([])
    assert untagged_resume.par.generation == 21

    # Without a saved state the strategy is rebuilt from the restored population.
    rebuilt = CMAPropagator(ActiveCMA(), limits, rng=3)
    rebuilt.bind(0, 1)
    for ind in population:
        rebuilt.observe(untagged(ind))
    rebuilt.load_state_dict({})
    rebuilt([])
    assert rebuilt.par.generation == 21


def test_a_resumed_island_of_another_size_keeps_its_strategy():
    limits = box(5.12, 4)
    before = CMAPropagator(ActiveCMA(), limits, rng=2)
    before.bind(0, 1)
    for i in range(45):
        ind = before([])[0]
        before.observe(evaluated(ind, ellipsoid(ind.position), i))
    state = before.state_dict()
    after = CMAPropagator(ActiveCMA(), limits, rng=3)
    after.bind(0, 12)  # lambda ceil(4 sqrt(12)) = 14 instead of 8
    after.load_state_dict(state)
    np.testing.assert_array_equal(after.par.mean, before.par.mean)
    assert after.par.lambda_ == 14 and after.par.generation == 5
    for i in range(45, 54):  # 4 results collected and 1 waiting, 9 more: one generation of 14
        ind = after([])[0]
        after.observe(evaluated(ind, ellipsoid(ind.position), i))
    after([])
    assert after.par.generation == 6


@pytest.mark.slow
def test_an_island_of_sixteen_workers_solves_the_ellipsoid():
    """The issue's case: 16 workers, 6,000 evaluations. With the shared mirrored orthogonal directions the
    median best loss over ``SEEDS`` is 9e-18 to 4e-17 under four BLAS kernels (near the resolution of the
    floats); with independent samples instead it is 2e-15 under each (worst run 1e-12), and 1.2.2's design
    ended at 0.64. The threshold, 2e-16, lies between the first two."""
    bests = []
    for seed in SEEDS:
        workers = [
            CMAPropagator(ActiveCMA(), box(5.12), rng=random.Random(1000 * seed + rank)) for rank in range(16)
        ]
        ended = simulate(workers, ellipsoid, 6000, seed=seed)
        bests.append(min(ind.loss for ind in ended))
        for rank, worker in enumerate(workers):
            # At its last breeding a worker learns, by generations of lambda (16), the results that ended
            # before, less those it holds back (at most half an evaluation time), and nothing later.
            last = max((ind for ind in ended if ind.rank == rank), key=lambda ind: ind.uid)
            bred = last.evaltime - last.evalperiod
            ended_before = sum(ind.evaltime <= bred + 1e-9 for ind in ended)
            settled = sum(ind.evaltime <= bred - worker._period for ind in ended)
            lambda_ = worker.par.lambda_
            assert settled // lambda_ <= worker.par.generation <= ended_before // lambda_, (seed, rank)
    assert statistics.median(bests) < 2e-16, bests


def test_a_state_saved_by_the_previous_design_is_loaded():
    """Checkpoints written before this design hold the strategy (mean in [0, 1]), the uids used and the
    generator: the strategy and the generator are taken over."""
    limits = box(1.0, 3)
    propagator = CMAPropagator(ActiveCMA(), limits, rng=0)
    par = CMAParameter(3, propagator.par.lambda_, np.full(3, 0.75), 0.05, ActiveCMA())
    par.generation = 7
    generator = np.random.default_rng(11)
    state = {"par": par.state_dict(), "used": [1, 2, 3], "np_rng": generator.bit_generator.state}
    propagator.load_state_dict(state)
    np.testing.assert_array_equal(propagator.par.mean, np.full(3, 0.25))
    assert propagator.par.sigma == 0.05 and propagator.par.generation == 7
    assert propagator.np_rng.bit_generator.state == generator.bit_generator.state


@pytest.mark.parametrize("island_size", [1, 2])
def test_only_a_worker_with_peers_holds_back_its_latest_results(island_size):
    """Alone, a worker learns its own result at its next breeding (the serial strategy); with peers it
    holds back the results of the last 5 % of an evaluation time, its own among them."""
    propagator = CMAPropagator(BasicCMA(), box(1.0, 2), pop_size=4, rng=0)
    propagator.bind(0, island_size)
    for i in range(4):
        ind = evaluated(propagator([])[0], float(i), i, evaltime=10.0 * i)
        ind.evalperiod = 10.0
        propagator.observe(ind)
    propagator([])
    assert propagator.par.generation == (1 if island_size == 1 else 0)
    assert propagator._margin == pytest.approx(0.5)
