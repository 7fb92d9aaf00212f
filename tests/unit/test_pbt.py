"""Population-based training on one process: explore, exploit, the propagator, and state transfer.

The runs under mpiexec (members on several workers, multi-rank members, stops) are in
``tests/mpi/test_pbt.py``; here each piece is checked on its own.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import pytest

from propulate import Individual, Propulator, Status
from propulate.breeding import Breeder
from propulate.checkpoint.evaluations import (
    INHERITABLE,
    EvaluationFolders,
    Resume,
    evaluation_checkpoint,
    states,
    sweep,
)
from propulate.parameters import Categorical, Float, Integer
from propulate.pbt import MemberStates, PopulationBasedTraining, StateUnavailableError, explore, replay
from propulate.pbt import states as pbt_states
from propulate.pbt.exploit import curves, loss_at, quantiles, ranks, truncation
from propulate.pbt.explore import perturb
from propulate.pbt.lineage import ancestry, histories, schedule
from propulate.population import Population
from propulate.space import SearchSpace

SPACE = SearchSpace.of(
    {
        "lr": Float(1e-4, 1e-1, log=True),
        "momentum": (0.0, 1.0),
        "shift": (-1.0, 1.0),
        "layers": (1, 8),
        "width": Integer(16, 1024, log=True),
        "batch": Integer(16, 256, step=16),
        "dropout": Float(0.0, 0.5, step=0.1),
        "activation": ("relu", "tanh", "gelu", "silu"),
        "norm": Categorical((True, False)),
    }
)
CONFIG = {
    "lr": 0.01,
    "momentum": 0.5,
    "shift": 0.0,
    "layers": 2,
    "width": 64,
    "batch": 64,
    "dropout": 0.2,
    "activation": "tanh",
    "norm": True,
}


# ------------------------------------------------------------------------------------------- explore


def test_explore_without_resampling_multiplies_by_a_factor_in_each_parameters_scale():
    rng = random.Random(0)
    for _ in range(200):
        new = explore(CONFIG, SPACE, rng, resample_probability=0.0)
        assert new["lr"] / CONFIG["lr"] == pytest.approx(1.2, rel=1e-9) or new["lr"] / CONFIG[
            "lr"
        ] == pytest.approx(0.8, rel=1e-9)
        assert new["momentum"] in (pytest.approx(0.6), pytest.approx(0.4))
        # A linear value of 0 is shifted by (factor - 1) times the width of its range.
        assert new["shift"] in (pytest.approx(0.4), pytest.approx(-0.4))
        assert new["width"] in (77, 51)
        assert new["activation"] in ("relu", "gelu")  # a neighbour in the declared order
        assert new["norm"] in (True, False)


def test_explore_keeps_integers_and_steps_on_their_grid_and_moves_them():
    rng = random.Random(1)
    layers = SPACE.index["layers"]
    assert perturb(layers, 2, 1.2, rng) == 3  # 2.4 rounds back to 2: one point up instead
    assert perturb(layers, 2, 0.8, rng) == 1
    assert perturb(layers, 8, 1.2, rng) == 8  # at the end of the range it stays
    dropout = SPACE.index["dropout"]
    assert perturb(dropout, 0.2, 1.2, rng) == 0.3  # 0.24 is read back as 0.2: one step up, on the grid
    assert perturb(dropout, 0.2, 0.8, rng) == 0.1
    batch = SPACE.index["batch"]
    assert perturb(batch, 64, 1.2, rng) == 80  # 76.8 -> 80, a multiple of 16
    for _ in range(300):
        new = explore(CONFIG, SPACE, rng)
        assert isinstance(new["layers"], int) and isinstance(new["width"], int)
        assert (new["batch"] - 16) % 16 == 0
        assert round(new["dropout"] * 10) == pytest.approx(new["dropout"] * 10)


def test_explore_shifts_categories_to_a_neighbour_and_stays_at_the_ends():
    rng = random.Random(2)
    activation = SPACE.index["activation"]
    seen = {perturb(activation, "relu", 1.2, rng) for _ in range(50)}
    assert seen == {"relu", "tanh"}
    seen = {perturb(activation, "gelu", 1.2, rng) for _ in range(50)}
    assert seen == {"tanh", "silu"}


def test_explore_stays_in_the_search_space_and_resamples_with_its_probability():
    rng = random.Random(3)
    config = dict(CONFIG)
    for _ in range(500):
        config = explore(config, SPACE, rng, resample_probability=0.25)
        SPACE.check_inside(SPACE.encode(config))
    # Resampling always: the values are the search space's draws, not perturbations.
    draws = [explore(CONFIG, SPACE, random.Random(seed), resample_probability=1.0) for seed in range(200)]
    assert len({d["layers"] for d in draws}) == 8
    assert min(d["momentum"] for d in draws) < 0.1 and max(d["momentum"] for d in draws) > 0.9


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"resample_probability": 1.5}, "resample_probability"),
        ({"perturbation_factors": ()}, "perturbation_factors"),
        ({"perturbation_factors": (1.2, -0.8)}, "perturbation_factors"),
        ({"perturbation_factors": "ab"}, "perturbation_factors"),
    ],
)
def test_explore_refuses_bad_arguments_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        explore(CONFIG, SPACE, random.Random(0), **kwargs)


# ------------------------------------------------------------------------------------------- exploit


def test_quantiles_follow_ray():
    assert quantiles([0], 0.25) == ([], [])
    assert quantiles([0, 1], 0.25) == ([1], [0])
    assert quantiles([0, 1, 2, 3], 0.25) == ([3], [0])
    assert quantiles(list(range(8)), 0.25) == ([6, 7], [0, 1])
    assert quantiles(list(range(5)), 0.5) == ([3, 4], [0, 1])  # never more than half in either
    assert quantiles(list(range(8)), 0.0) == ([], [])


LIMITS = {"lr": Float(0.01, 1.0, log=True)}


def interval(
    uid: int,
    member: int,
    index: int,
    loss: float,
    lr: float = 0.1,
    until: int | None = None,
    parent: int = -1,
    donor: int = -1,
    status: Status = Status.COMPLETED,
    step: int = 2,
) -> Individual:
    """One completed interval of a member (``step`` steps each)."""
    ind = Individual({"lr": lr}, LIMITS)
    ind.uid, ind.loss, ind.status = uid, loss, status
    until = (index + 1) * step if until is None else until
    ind["_member"], ind["_interval"], ind["_start"], ind["_until"] = member, index, until - step, until
    ind["_parent"], ind["_donor"], ind["_previous"] = parent, donor, parent if donor < 0 else -1
    ind.steps = until
    return ind


def test_truncation_copies_a_top_member_only_from_the_bottom_quantile():
    members = curves([interval(m, m, 0, loss) for m, loss in enumerate([0.4, 0.1, 0.3, 0.2])])
    rng = random.Random(0)
    assert ranks(members) == {0: 3, 1: 0, 2: 2, 3: 1}
    assert truncation(0, members, 0.25, rng) == 1  # the worst copies the best
    assert truncation(2, members, 0.25, rng) is None
    assert truncation(1, members, 0.25, rng) is None
    assert truncation(0, {0: members[0]}, 0.25, rng) is None  # alone: nobody to compare with
    tied = curves([interval(m, m, 0, 0.5) for m in range(2)])
    assert ranks(tied) == {0: 0, 1: 1}  # equal losses: the lower member index wins
    assert truncation(1, tied, 0.25, rng) == 0


def test_members_are_compared_at_the_progress_both_reached():
    inds = [
        interval(0, 0, 0, 0.9),  # member 0 after 2 steps
        interval(1, 1, 0, 0.1),  # member 1 after 2 and 4 steps
        interval(2, 1, 1, 0.05),
        interval(3, 2, 0, 0.5),  # member 2 after 2 and, having copied a donor ahead, 6 steps
        interval(4, 2, 1, 0.01, until=6),
    ]
    members = curves(inds)
    assert members[1] == [(2, 0.1), (4, 0.05)] and members[2] == [(2, 0.5), (6, 0.01)]
    assert loss_at(members[2], 4) == 0.5 and loss_at(members[2], 1) == float("inf")
    # 1 and 2 meet at step 4, where 2's latest result is that of step 2: 0.5 against 1's 0.05.
    assert ranks(members) == {0: 2, 1: 0, 2: 1}
    # A member that ends an interval before the others reach its step is compared at theirs.
    ahead = curves([interval(0, 0, 0, 0.9), interval(1, 0, 1, 0.8), interval(2, 1, 0, 0.1)])
    assert truncation(0, ahead, 0.25, random.Random(0)) == 1


# ---------------------------------------------------------------------------------------- propagator


def pbt(member: int = 0, **kwargs) -> PopulationBasedTraining:
    propagator = PopulationBasedTraining(LIMITS, random.Random(member), perturbation_interval=2, **kwargs)
    propagator.bind(member, 4)
    return propagator


def test_a_members_first_interval_starts_from_nothing():
    (ind,) = pbt(3)([interval(0, 0, 0, 0.5)])
    extras = ind.extras
    assert (extras["_member"], extras["_interval"], extras["_start"], extras["_until"]) == (3, 0, 0, 2)
    assert extras["_parent"] == extras["_previous"] == extras["_donor"] == -1


def test_a_member_in_the_top_continues_its_training_with_its_configuration():
    inds = [interval(10, 0, 0, 0.1, lr=0.3), interval(11, 1, 0, 0.9)]
    (ind,) = pbt(0)(inds)
    assert ind["lr"] == 0.3
    extras = ind.extras
    assert (extras["_interval"], extras["_start"], extras["_until"], extras["_parent"]) == (1, 2, 4, 10)
    assert extras["_donor"] == -1 and extras["_previous"] == 10


def test_a_member_in_the_bottom_copies_the_donors_latest_state_and_explores_its_configuration():
    # Member 1 is ahead: its result at step 2 ranks it, its latest interval (step 4) is what is copied.
    inds = [
        interval(10, 0, 0, 0.9, lr=0.05),
        interval(20, 1, 0, 0.1, lr=0.5),
        interval(21, 1, 1, 0.05, lr=0.5),
    ]
    (ind,) = pbt(0, resample_probability=0.0)(inds)
    extras = ind.extras
    assert extras["_donor"] == 1 and extras["_parent"] == 21 and extras["_previous"] == 10
    assert (extras["_interval"], extras["_start"], extras["_until"]) == (1, 4, 6)
    assert ind["lr"] in (pytest.approx(0.6), pytest.approx(0.4))


def test_no_exploit_during_the_burn_in_period():
    inds = [interval(10, 0, 0, 0.9), interval(20, 1, 0, 0.1)]
    (ind,) = pbt(0, burn_in_period=4)(inds)
    assert ind["_donor"] == -1 and ind["_parent"] == 10
    inds += [interval(11, 0, 1, 0.8, parent=10), interval(21, 1, 1, 0.05, parent=20)]
    (ind,) = pbt(0, burn_in_period=4)(inds)
    assert ind["_donor"] == 1 and ind["_parent"] == 21


def test_a_member_whose_interval_failed_copies_the_best_member():
    propagator = pbt(0)
    inds = [interval(10, 0, 0, 0.1), interval(20, 1, 0, 0.5), interval(30, 2, 0, 0.9)]
    propagator.observe(interval(11, 0, 1, float("nan"), status=Status.FAILED, parent=10))
    (ind,) = propagator(inds)
    assert ind["_donor"] == 1 and ind["_parent"] == 20 and ind["_interval"] == 2


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"perturbation_interval": 0}, "perturbation_interval"),
        ({"burn_in_period": -1}, "burn_in_period"),
        ({"quantile_fraction": 0.6}, "quantile_fraction"),
        ({"quantile_fraction": -0.1}, "quantile_fraction"),
        ({"resample_probability": 2}, "resample_probability"),
        ({"perturbation_factors": (0,)}, "perturbation_factors"),
        ({"keep_states": 0}, "keep_states"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PopulationBasedTraining(LIMITS, **kwargs)


def test_an_rng_that_is_no_generator_is_refused_by_name():
    with pytest.raises(TypeError, match=r"rng: expected a random\.Random"):
        PopulationBasedTraining(LIMITS, rng=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lr"):
        PopulationBasedTraining({"lr": (1.0,)})


def test_the_breeder_evaluates_a_members_repeated_configuration():
    population = Population()
    first = interval(10, 0, 0, 0.1, lr=0.3)
    population.add(first)
    breeder = Breeder(pbt(0), population, random.Random(0))
    ind = breeder.breed()
    assert ind is not None and ind["lr"] == 0.3 and breeder.repeats == 0
    assert breeder.verdict(SearchSpace.of(LIMITS).key(ind.position), 0, True, False) is True


# ---------------------------------------------------------------------------------------------- lineage


def test_lineage_follows_parents_across_members():
    inds = [
        interval(10, 0, 0, 0.9, lr=0.05),
        interval(20, 1, 0, 0.2, lr=0.5),
        interval(11, 0, 1, 0.1, lr=0.6, parent=20, donor=1),
        interval(21, 1, 1, 0.15, lr=0.5, parent=20),
    ]
    members = histories(inds)
    assert [s.uid for s in members[0]] == [10, 11] and members[0][1].donor == 1
    assert [s.uid for s in ancestry(inds, 11)] == [20, 11]
    best = schedule(inds)
    assert [(s.start, s.until, s.params["lr"]) for s in best] == [(0, 2, 0.5), (2, 4, 0.6)]
    assert schedule([]) == []


# ------------------------------------------------------------------------------------ state transfer


def committed_state(folder: Path, step: int, w: float, interim: int | None = None) -> None:
    """Make ``folder`` a completed interval's folder: a committed state and its interim losses."""
    (folder / f"step-{step:08d}.000001").mkdir(parents=True)
    (folder / f"step-{step:08d}.000001" / "w.json").write_text(json.dumps({"w": w}))
    losses = [{"loss": float(k), "metrics": {}} for k in range(step if interim is None else interim)]
    (folder / "interim.json").write_text(json.dumps(losses))


def test_transfer_links_the_latest_state_and_leaves_no_pin(tmp_path):
    source, target = tmp_path / "1", tmp_path / "2"
    committed_state(source, 4, 1.5)
    target.mkdir()
    step, name, interim = pbt_states.transfer(source, target, "2")
    assert (step, name) == (4, "step-00000004.000000") and len(interim) == 4
    copied = target / name / "w.json"
    assert json.loads(copied.read_text()) == {"w": 1.5}
    assert os.stat(copied).st_ino == os.stat(source / "step-00000004.000001" / "w.json").st_ino  # a link
    assert not [n for n in os.listdir(source) if n.startswith(".pin-")]
    assert sorted(os.listdir(target)) == [name]


def test_the_owner_cannot_remove_a_state_while_it_is_copied(tmp_path, monkeypatch):
    source, target = tmp_path / "1", tmp_path / "2"
    committed_state(source, 2, 0.25)
    (source / "step-00000002.000001" / "more.bin").write_bytes(b"x" * 100)
    target.mkdir()
    refused = []
    link = pbt_states._link_or_copy

    def owner_tries_to_remove(src: str, dst: str) -> None:
        refused.append(not pbt_states.retire(source))  # the owner's removal, in the middle of the copy
        link(src, dst)

    monkeypatch.setattr(pbt_states, "_link_or_copy", owner_tries_to_remove)
    _, name, _ = pbt_states.transfer(source, target, "2")
    assert all(refused) and refused
    assert sorted(os.listdir(target / name)) == ["more.bin", "w.json"]
    assert pbt_states.retire(source) and not source.exists()  # unpinned now: removed whole
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".retired-")]


def test_a_commit_during_the_copy_is_copied_whole(tmp_path, monkeypatch):
    """A new state replaces the one being copied: the copy starts again from the new one."""
    source, target = tmp_path / "1", tmp_path / "2"
    committed_state(source, 2, 0.25, interim=3)
    target.mkdir()
    link = pbt_states._link_or_copy
    calls = []

    def commit_meanwhile(src: str, dst: str) -> None:
        if not calls:  # as EvaluationFolders.commit: rename a new state into place, remove the old one
            (source / "pending").mkdir()
            (source / "pending" / "w.json").write_text(json.dumps({"w": 0.5}))
            os.rename(source / "pending", source / "step-00000003.000001")
            pbt_states.shutil.rmtree(source / "step-00000002.000001")
        calls.append(src)
        link(src, dst)

    monkeypatch.setattr(pbt_states, "_link_or_copy", commit_meanwhile)
    monkeypatch.setattr(pbt_states, "PAUSE", 0.0)
    step, name, _ = pbt_states.transfer(source, target, "2")
    assert step == 3 and json.loads((target / name / "w.json").read_text()) == {"w": 0.5}
    assert sorted(os.listdir(target)) == [name]


def test_a_source_renamed_away_for_a_moment_is_copied_once_it_is_back(tmp_path, monkeypatch):
    """As its owner's retire while another transfer holds a pin: renamed away, seen pinned, renamed back."""
    source, target = tmp_path / "1", tmp_path / "2"
    committed_state(source, 2, 0.25)
    (source / "step-00000002.000001" / "more.bin").write_bytes(b"x" * 100)
    target.mkdir()
    away = tmp_path / ".retired-1"
    link = pbt_states._link_or_copy

    moments: list[str] = []

    def away_and_back(src: str, dst: str) -> None:
        moments.append(src)
        if len(moments) == 1:  # away before the first file, back before the second: half a copy
            os.rename(source, away)
        elif len(moments) == 2:
            os.rename(away, source)
        link(src, dst)

    monkeypatch.setattr(pbt_states, "_link_or_copy", away_and_back)
    monkeypatch.setattr(pbt_states, "PAUSE", 0.0)
    _, name, _ = pbt_states.transfer(source, target, "2")
    assert len(moments) == 4 and sorted(os.listdir(target / name)) == ["more.bin", "w.json"]


def test_a_state_gone_for_good_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(pbt_states, "PAUSE", 0.0)
    (tmp_path / "2").mkdir()
    with pytest.raises(StateUnavailableError):
        pbt_states.transfer(tmp_path / "1", tmp_path / "2", "2")
    assert isinstance(StateUnavailableError("x"), OSError)


def folders(tmp_path: Path, keep: int = 2) -> EvaluationFolders:
    return EvaluationFolders(tmp_path, root=True, inheritance=MemberStates(keep))


def test_an_interval_starts_from_its_parents_committed_state(tmp_path):
    evaluations = folders(tmp_path)
    committed_state(evaluations.folder(20), 4, 2.5)
    ind = interval(30, 0, 1, 0.0, until=6, parent=20, donor=1)
    ind["_previous"] = 10
    resume = evaluations.prepare(ind, redo=False)
    assert resume == Resume([(float(k), {}) for k in range(4)], 4, "step-00000004.000000", 6)
    assert json.loads((evaluations.folder(30) / resume.state / "w.json").read_text()) == {"w": 2.5}
    # Attempted again after an interruption: the folder says the same.
    assert evaluations.prepare(ind, redo=True) == resume
    # A first interval starts from nothing, with its step budget.
    assert evaluations.prepare(interval(31, 2, 0, 0.0), redo=False) == Resume(until=2)
    # An individual of no population-based training is not seeded.
    plain = Individual({"lr": 0.1}, LIMITS)
    plain.uid = 40
    assert evaluations.prepare(plain, redo=False) is None


def test_a_donor_state_gone_for_good_leaves_the_member_on_its_own(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(pbt_states, "PAUSE", 0.0)
    evaluations = folders(tmp_path)
    committed_state(evaluations.folder(10), 2, 1.0)
    ind = interval(30, 0, 1, 0.0, until=6, parent=20, donor=1)  # donor's state at step 4 is gone
    ind["_previous"] = 10
    with caplog.at_level(logging.WARNING, logger="propulate"):
        resume = evaluations.prepare(ind, redo=False)
    assert "gone" in caplog.text
    assert ind["_parent"] == 10 and ind["_donor"] == -1 and (ind["_start"], ind["_until"]) == (2, 4)
    assert ind["_unavailable"] == 1
    assert resume is not None and resume.step == 2 and resume.until == 4


def test_each_member_keeps_its_latest_states_and_a_sweep_keeps_them_too(tmp_path):
    evaluations = folders(tmp_path, keep=2)
    island: list[Individual] = []
    for index in range(4):
        for member in (0, 1):
            ind = interval(10 * member + index, member, index, 0.5)
            committed_state(evaluations.folder(ind.uid), ind["_until"], 0.0)
            (evaluations.folder(ind.uid) / "pending").mkdir()
            island.append(ind)
            assert evaluations.inheritance.keep(ind, evaluations.folder(ind.uid), island)
    left = sorted(int(name) for name in os.listdir(evaluations.base))
    assert left == [2, 3, 12, 13]
    assert all((evaluations.folder(uid) / INHERITABLE).exists() for uid in left)
    assert not (evaluations.folder(3) / "pending").exists()
    assert states(evaluations.folder(3))[-1][0] == 8
    assert sweep(tmp_path, [], island, 0) == 0
    assert sorted(int(name) for name in os.listdir(evaluations.base)) == left


# ------------------------------------------------------------------------------------------------ replay


def counting(trained: list[tuple[float, int]]):
    """A generator loss function: ``w += lr`` per step, continued from its committed state."""

    def loss_fn(params):
        checkpoint = evaluation_checkpoint()
        w, step = 0.0, 0
        if checkpoint.latest is not None:
            w, step = json.loads((checkpoint.latest / "w.json").read_text())["w"], checkpoint.step
        while True:
            w += params["lr"]
            step += 1
            trained.append((params["lr"], step))
            (checkpoint.path / "w.json").write_text(json.dumps({"w": w}))
            yield w

    return loss_fn


def test_replay_trains_one_network_with_the_schedule(tmp_path):
    inds = [
        interval(10, 0, 0, 0.9, lr=0.05),
        interval(20, 1, 0, 0.2, lr=0.5),
        interval(11, 0, 1, 0.1, lr=0.6, parent=20, donor=1),
        interval(12, 0, 2, 0.05, lr=0.6, parent=11),
    ]
    trained: list[tuple[float, int]] = []
    losses = replay(counting(trained), schedule(inds), tmp_path)
    assert trained == [(0.5, 1), (0.5, 2), (0.6, 3), (0.6, 4), (0.6, 5), (0.6, 6)]
    assert losses == pytest.approx([0.5, 1.0, 1.6, 2.2, 2.8, 3.4])
    assert replay(counting([]), schedule(inds)) == pytest.approx(losses)  # in a temporary directory


def test_replay_refuses_a_segment_without_steps():
    segment = schedule([interval(10, 0, 0, 0.9)])[0]
    empty = type(segment)(2, 2, {"lr": 0.1}, 0.0, 0, -1, 10)
    with pytest.raises(ValueError, match=r"segments\[1\]"):
        replay(counting([]), [segment, empty])


# ------------------------------------------------------------------------------------- in a run


def test_a_run_of_one_member_continues_its_own_state(tmp_path):
    trained: list[tuple[float, int]] = []
    pbt = PopulationBasedTraining(LIMITS, random.Random(0), perturbation_interval=2)
    propulator = Propulator(counting(trained), pbt, 1, generations=3, checkpoint_path=tmp_path, resume=False)
    propulator.propulate()
    (member,) = histories(propulator.population).values()
    assert [(s.start, s.until) for s in member] == [(0, 2), (2, 4), (4, 6)]
    assert [step for _, step in trained] == [1, 2, 3, 4, 5, 6]  # each step once, continued
    assert member[-1].loss == pytest.approx(6 * member[0].params["lr"])


def test_a_plain_loss_function_is_refused_naming_loss_fn(tmp_path):
    pbt = PopulationBasedTraining(LIMITS, random.Random(0))
    propulator = Propulator(lambda params: 1.0, pbt, 1, generations=2, checkpoint_path=tmp_path, resume=False)
    with pytest.raises(TypeError, match="loss_fn: population-based training needs a generator"):
        propulator.propulate()


def test_a_copy_cut_short_by_a_kill_is_made_again_on_resume(tmp_path):
    """A kill -9 in the middle of a copy (in a forked process: no cleanup runs); the resume copies whole."""
    evaluations = folders(tmp_path)
    donor = evaluations.folder(20)
    committed_state(donor, 4, 2.5)
    (donor / "step-00000004.000001" / "more.bin").write_bytes(b"x" * 100)
    ind = interval(30, 0, 1, 0.0, until=6, parent=20, donor=1)
    ind["_previous"] = 10
    pid = os.fork()
    if pid == 0:  # the job that is killed after linking one file
        linked = []

        def killed_after_one_file(src: str, dst: str) -> None:
            if linked:
                os._exit(9)
            linked.append(src)
            os.link(src, dst)

        pbt_states._link_or_copy = killed_after_one_file
        evaluations.prepare(ind, redo=False)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] >> 8 == 9
    target = evaluations.folder(30)
    assert not states(target) and len(os.listdir(target / ".incoming")) == 1, "half a copy, not in place"
    assert not pbt_states.retire(donor) and donor.is_dir(), "the pin left behind keeps the donor"
    resume = evaluations.prepare(ind, redo=True)  # the resumed job evaluates the interval again
    assert resume is not None and (resume.step, resume.until) == (4, 6)
    assert sorted(os.listdir(target / resume.state)) == ["more.bin", "w.json"]
    assert not [n for n in os.listdir(donor) if n.startswith(".pin-")], "the pin is gone with the copy"
    assert not (target / ".incoming").exists()
    assert pbt_states.retire(donor)


# ------------------------------------------------------------------------------------------- report


def test_the_text_report_lists_members_and_the_best_schedule():
    pytest.importorskip("pandas")
    from propulate.report.frame import to_dataframe
    from propulate.report.lineage import best_schedule, member_summary
    from propulate.report.text import format_report

    inds = [
        interval(10, 0, 0, 0.9, lr=0.05),
        interval(20, 1, 0, 0.2, lr=0.5),
        interval(11, 0, 1, 0.1, lr=0.6, parent=20, donor=1),
        interval(21, 1, 1, 0.15, lr=0.5, parent=20),
    ]
    for k, ind in enumerate(inds):
        ind.evaltime, ind.evalperiod = 1000.0 + k, 1.0
    frame = to_dataframe(inds)
    members = member_summary(frame)
    assert members["intervals"].tolist() == [2, 2] and members["exploits"].tolist() == [1, 0]
    assert members["latest"].tolist() == [0.1, 0.15]
    schedule = best_schedule(frame)
    assert schedule[["start", "until", "member", "donor"]].values.tolist() == [[0, 2, 1, -1], [2, 4, 0, 1]]
    assert schedule["lr"].tolist() == [0.5, 0.6]
    report = format_report(frame)
    assert "Population-based training: members" in report and "Schedule of the best member's state" in report
    assert "Population-based training" not in format_report(to_dataframe([Individual({"lr": 0.1}, LIMITS)]))


def test_the_html_report_draws_each_members_schedule():
    pytest.importorskip("plotly")
    from propulate.report.frame import to_dataframe
    from propulate.report.html import build_html

    inds = [
        interval(10, 0, 0, 0.9, lr=0.05),
        interval(20, 1, 0, 0.2, lr=0.5),
        interval(11, 0, 1, 0.1, lr=0.6, parent=20, donor=1),
    ]
    for k, ind in enumerate(inds):
        ind.evaltime, ind.evalperiod = 1000.0 + k, 1.0
    page = build_html(to_dataframe(inds))
    section = page[page.index('<section id="pbt">') :].split("</section>")[0]
    assert section.count('"name":"member ') == 2 and "best member's schedule" in section
    assert '<section id="pbt">' not in build_html(to_dataframe([Individual({"lr": 0.1}, LIMITS)]))
