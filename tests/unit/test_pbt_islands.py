"""Population-based training between islands, on one process: who emigrates, whom migrants replace as
donors, and how a migrant's state travels by reference, is taken over on arrival, and is removed.

The runs of two islands under mpiexec are in ``tests/mpi/test_pbt.py``.
"""

from __future__ import annotations

import json
import logging
import os
import random
from pathlib import Path

import pytest

from propulate import Individual, Status
from propulate.checkpoint.evaluations import INHERITABLE, EvaluationFolders, states, sweep
from propulate.migration import MigrationPolicy
from propulate.parameters import Float
from propulate.pbt import MemberStates, PopulationBasedTraining
from propulate.pbt import states as pbt_states
from propulate.pbt.lineage import ancestry, histories, schedule
from propulate.population import Population
from propulate.propagators import Propagator, SelectMin, SelectUniform

LIMITS = {"lr": Float(0.01, 1.0, log=True)}


def interval(uid: int, member: int, index: int, loss: float, lr: float = 0.1, parent: int = -1) -> Individual:
    """One completed interval of 2 steps of ``member`` on island 0."""
    ind = Individual({"lr": lr}, LIMITS)
    ind.uid, ind.loss, ind.status, ind.island, ind.current = uid, loss, Status.COMPLETED, 0, member
    until = 2 * (index + 1)
    ind["_member"], ind["_interval"], ind["_start"], ind["_until"] = member, index, until - 2, until
    ind["_parent"], ind["_donor"], ind["_previous"] = parent, -1, parent
    ind.steps = until
    return ind


def migrant(
    uid: int, island: int, member: int, index: int, curve: list[list[float]], state: int | None = None
) -> Individual:
    """A migrant from ``island``: a copy of its member's interval, its state taken over (``_state``)."""
    ind = interval(uid, member, index, curve[-1][1], lr=0.5)
    ind.island, ind.migration_steps = island, 1
    ind["_state"], ind["_curve"] = uid if state is None else state, curve
    return ind


def pbt(member: int = 0, observed: list[Individual] = (), **kwargs) -> PopulationBasedTraining:
    propagator = PopulationBasedTraining(LIMITS, random.Random(member), perturbation_interval=2, **kwargs)
    propagator.bind(member, 2)
    for ind in observed:
        propagator.observe(ind)
    return propagator


def committed_state(folder: Path, step: int, w: float) -> None:
    """Make ``folder`` a completed interval's folder: a committed state, its interim losses, kept."""
    (folder / f"step-{step:08d}.000001").mkdir(parents=True)
    (folder / f"step-{step:08d}.000001" / "w.json").write_text(json.dumps({"w": w}))
    (folder / "interim.json").write_text(json.dumps([{"loss": float(k), "metrics": {}} for k in range(step)]))
    (folder / INHERITABLE).touch()


def pins(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(".pin-"))


# ------------------------------------------------------------------------------- who may emigrate


def test_the_propagator_names_its_inheritance_and_whether_it_filters_emigrants():
    assert Propagator(offspring=1).inheritance is None and not SelectMin(1).filters_emigrants
    propagator = pbt()
    assert propagator.inheritance is propagator.states and propagator.filters_emigrants


def test_only_a_members_latest_completed_interval_emigrates():
    old, latest, other = interval(1, 0, 0, 0.5), interval(2, 0, 1, 0.4), interval(3, 1, 0, 0.3)
    failed = interval(4, 1, 1, float("nan"))
    failed.status = Status.FAILED
    arrived = migrant(5, 1, 0, 3, [[8, 0.1]])
    propagator = pbt(0, [old, latest, other, failed, arrived])
    assert [propagator.emigrates(ind) for ind in (old, latest, other, failed, arrived)] == [
        False,
        True,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("selection", [SelectMin, SelectUniform])
def test_the_migration_policy_sends_only_eligible_individuals(selection):
    inds = [interval(1, 0, 0, 0.1), interval(2, 0, 1, 0.5), interval(3, 1, 0, 0.2), interval(4, 1, 1, 0.3)]
    population = Population()
    population.extend(inds)
    propagator = pbt(0, inds)
    rng = random.Random(0)
    args = (0, [[0, 1], [1, 0]], 1.0, selection, SelectMin, False, rng, 2)
    uids = iter(range(100, 200))
    (sent,) = MigrationPolicy(*args, propagator.emigrates).emigrate(population, 0, lambda: next(uids))
    # Worker 0 sends its member's latest interval, not the better old one; migration deactivates it.
    assert [ind.uid for ind in sent.emigrants] == [2] == sent.departed
    assert sent.travellers[0].uid == 100 and sent.travellers[0]["_interval"] == 1
    assert MigrationPolicy(*args).choose_emigrants(population, 1, 1)[0].uid in (3, 4)


# --------------------------------------------------------------------------------- migrants as donors


def test_a_bottom_member_copies_a_migrant_ahead_of_its_island():
    own = [interval(1, 0, 0, 0.9), interval(2, 1, 0, 0.5)]
    # Member 0 of island 1 was better at step 2 already, and reached step 6.
    arrived = migrant(7, 1, 0, 2, [[2, 0.2], [4, 0.1], [6, 0.05]])
    (ind,) = pbt(0, resample_probability=0.0)([*own, arrived])
    extras = ind.extras
    assert (extras["_parent"], extras["_donor"], extras["_donor_island"], extras["_previous"]) == (7, 0, 1, 1)
    assert (extras["_interval"], extras["_start"], extras["_until"]) == (1, 6, 8)
    assert ind["lr"] in (pytest.approx(0.6), pytest.approx(0.4))
    # A member of the island in the top continues: migrants are compared at the progress both reached.
    (top,) = pbt(1)([*own, migrant(7, 1, 0, 2, [[2, 0.7], [4, 0.1], [6, 0.05]])])
    assert top["_donor"] == -1 and top["_parent"] == 2


def test_only_the_latest_migrant_of_a_member_with_a_state_is_a_donor():
    own = [interval(1, 0, 0, 0.9), interval(2, 1, 0, 0.8)]
    older = migrant(7, 1, 0, 0, [[2, 0.1]])
    newer = migrant(8, 1, 0, 1, [[2, 0.1], [4, 0.05]])
    (ind,) = pbt(0)([*own, older, newer])
    assert ind["_parent"] == 8
    stateless = migrant(9, 1, 0, 2, [[2, 0.1], [4, 0.05], [6, 0.01]], state=-1)
    (ind,) = pbt(0)([*own, older, newer, stateless])
    assert ind["_parent"] == 8, "a migrant whose state is gone is no donor"


def test_a_member_whose_latest_interval_left_continues_from_it_and_is_no_donor():
    first, left = interval(1, 0, 0, 0.1), interval(2, 0, 1, 0.05, parent=1)
    others = [interval(3, 1, 0, 0.9), interval(4, 1, 1, 0.95, parent=3)]
    # Member 0's interval 1 emigrated (deactivated): the island passes only what is active.
    (ind,) = pbt(0, [first, left, *others])([first, *others])
    assert (ind["_interval"], ind["_parent"], ind["_previous"], ind["_start"]) == (2, 2, 2, 4)
    # Member 1, in the bottom, does not copy member 0's older state meanwhile.
    (ind,) = pbt(1, [first, left, *others])([first, *others])
    assert ind["_donor"] == -1 and ind["_parent"] == 4


def test_histories_leave_migrants_out():
    inds = [interval(1, 0, 0, 0.5), interval(2, 0, 1, 0.4, parent=1), migrant(7, 1, 0, 3, [[8, 0.1]])]
    assert {member: [s.uid for s in history] for member, history in histories(inds).items()} == {0: [1, 2]}


# ------------------------------------------------------------------------------ a migrant's state


def folders(tmp_path: Path, keep: int = 2) -> EvaluationFolders:
    return EvaluationFolders(tmp_path / "ckpt", root=True, inheritance=MemberStates(keep))


def test_a_leased_state_stays_until_the_new_island_took_it_over(tmp_path):
    sender, receiver = folders(tmp_path), folders(tmp_path)
    sender.inheritance.members = {0}  # as its propagator, bound to worker 0 of its island, tells it
    island = [interval(1, 0, 0, 0.5), interval(2, 0, 1, 0.4, parent=1)]
    committed_state(sender.folder(2), 4, 1.25)
    traveller = island[1].copy()
    traveller.uid, traveller.migration_steps = 50, 1
    sender.departed([traveller], [island[1]], island)
    assert traveller["_state"] == 2 and traveller["_curve"] == [[2, 0.5], [4, 0.4]]
    assert pins(sender.folder(2)) == [".pin-migrant-50"]
    # The owner trains on: its removals leave the leased folder.
    for index in (2, 3):
        island.append(interval(1 + index, 0, index, 0.3, parent=index))
        committed_state(sender.folder(1 + index), 2 * index + 2, 0.0)
        sender.inheritance.keep(island[-1], sender.folder(1 + index), island)
    assert sender.folder(2).exists() and not sender.folder(1).exists()
    # Its new island's first worker copies it into the migrant's own folder and lifts the lease.
    receiver.arrived([traveller], [traveller])
    copied = receiver.folder(50) / "step-00000004.000000" / "w.json"
    assert json.loads(copied.read_text()) == {"w": 1.25} and (receiver.folder(50) / INHERITABLE).exists()
    assert os.stat(copied).st_ino == os.stat(sender.folder(2) / "step-00000004.000001" / "w.json").st_ino
    assert len(json.loads((receiver.folder(50) / "interim.json").read_text())) == 4
    assert traveller["_state"] == 50 and pins(sender.folder(2)) == []
    # A resume that finds it arrived leaves it be; the owner removes its folder at the end of the run.
    receiver.arrived([traveller], [traveller])
    assert states(receiver.folder(50))[-1][0] == 4
    sender.close(island)
    assert not sender.folder(2).exists() and receiver.folder(50).exists()
    assert sorted(int(name) for name in os.listdir(sender.base)) == [3, 4, 50]


def test_a_migrant_whose_state_is_gone_is_no_donor(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(pbt_states, "PAUSE", 0.0)
    evaluations = folders(tmp_path)
    emigrant = interval(2, 0, 1, 0.4)
    traveller = emigrant.copy()
    traveller.uid, traveller.migration_steps = 50, 1
    with caplog.at_level(logging.WARNING, logger="propulate"):
        evaluations.departed([traveller], [emigrant], [emigrant])
    assert traveller["_state"] == -1 and "gone" in caplog.text
    evaluations.arrived([traveller], [traveller])
    assert not evaluations.folder(50).exists()


def test_a_migrant_caught_in_flight_by_the_end_of_a_job_is_taken_over_on_resume(tmp_path):
    evaluations = folders(tmp_path)
    committed_state(evaluations.folder(2), 4, 0.5)
    traveller = migrant(50, 1, 0, 1, [[2, 0.5], [4, 0.4]], state=2)
    assert pbt_states.lease(evaluations.folder(2), "50")
    # The job was killed in the middle of the copy on arrival: half a copy, not yet inheritable.
    (evaluations.folder(50) / ".incoming").mkdir(parents=True)
    assert sweep(tmp_path / "ckpt", [], [interval(2, 0, 1, 0.4), traveller], 0) == 1
    assert not evaluations.folder(50).exists()
    evaluations.arrived([traveller], [traveller])  # the restored population, on the island's first worker
    assert states(evaluations.folder(50))[-1][0] == 4 and traveller["_state"] == 50
    assert pins(evaluations.folder(2)) == []


def test_the_first_worker_keeps_the_latest_migrants_of_each_member(tmp_path):
    evaluations = folders(tmp_path, keep=2)
    island: list[Individual] = []
    for uid, (origin, member, index) in enumerate(
        [(1, 0, 0), (1, 1, 0), (1, 0, 1), (1, 0, 2), (2, 0, 0)], 50
    ):
        committed_state(evaluations.folder(uid - 40), 2 * index + 2, 0.0)
        traveller = migrant(uid, origin, member, index, [[2 * index + 2, 0.1]], state=uid - 40)
        island.append(traveller)
        if uid == 52:
            (evaluations.folder(50) / ".pin-60").touch()  # a member of the island copies it now
        evaluations.arrived([traveller], island)
    migrants = sorted(int(name) for name in os.listdir(evaluations.base) if int(name) >= 50)
    # Member 0 of island 1 keeps its latest 2 (52, 53); 50 stays while pinned, until the end of the run.
    assert migrants == [50, 51, 52, 53, 54]
    (evaluations.folder(50) / ".pin-60").unlink()
    evaluations.close(island)
    assert sorted(int(name) for name in os.listdir(evaluations.base) if int(name) >= 50) == [51, 52, 53, 54]


def test_a_resume_removes_the_pins_a_killed_job_left_and_keeps_leases_still_needed(tmp_path):
    evaluations = folders(tmp_path)
    committed_state(evaluations.folder(2), 4, 0.5)
    for name in (".pin-30", ".pin-arrival-51", ".pin-migrant-50", ".pin-migrant-51", ".pin-migrant-52"):
        (evaluations.folder(2) / name).touch()  # copies and travellers under way when the job was killed
    committed_state(evaluations.folder(51), 4, 0.5)  # 51 arrived, 52 never reached the checkpoint
    in_flight, arrived = migrant(50, 1, 0, 1, [[4, 0.4]], state=2), migrant(51, 1, 0, 1, [[4, 0.4]])
    assert sweep(tmp_path / "ckpt", [], [interval(2, 0, 1, 0.4), in_flight, arrived], 0) == 0
    assert pins(evaluations.folder(2)) == [".pin-migrant-50"]


# -------------------------------------------------------------------------------- lineage across islands


def two_islands() -> list[Individual]:
    """Island 1's member 0 trained 2 intervals; island 0's member 0 then exploited its migrant."""
    there = [interval(100, 0, 0, 0.5, lr=0.3), interval(101, 0, 1, 0.2, lr=0.3, parent=100)]
    for ind in there:
        ind.island = 1
    carried = migrant(7, 1, 0, 1, [[2, 0.5], [4, 0.2]])
    carried["_parent"], carried["_emigrant"] = 100, 101
    (copied,) = pbt(0, resample_probability=0.0)([interval(1, 0, 0, 0.9), interval(2, 1, 0, 0.8), carried])
    assert (copied["_parent"], copied["_origin"], copied["_donor_island"]) == (7, 101, 1)
    copied.uid, copied.loss, copied.status, copied.island, copied.steps = 3, 0.1, Status.COMPLETED, 0, 6
    return [interval(1, 0, 0, 0.9), interval(2, 1, 0, 0.8), *there, copied]


def test_a_lineage_follows_an_exploited_migrant_to_its_island():
    run = two_islands()
    assert [segment.uid for segment in ancestry(run, 3)] == [100, 101, 3]


def test_the_report_names_members_by_island_and_follows_migrants():
    pytest.importorskip("pandas")
    from propulate.report.frame import to_dataframe
    from propulate.report.lineage import best_schedule, member_summary

    run = two_islands()
    for k, ind in enumerate(run):
        ind.evaltime, ind.evalperiod = 1000.0 + k, 1.0
    frame = to_dataframe(run)
    members = member_summary(frame)
    assert members.index.names == ["island", "member"]
    assert members["intervals"].to_dict() == {(0, 0): 2, (0, 1): 1, (1, 0): 2}
    schedule = best_schedule(frame)
    assert schedule[["island", "start", "until", "member"]].values.tolist() == [
        [1, 0, 2, 0],
        [1, 2, 4, 0],
        [0, 4, 6, 0],
    ]


# ------------------------------------------------------------------------- a resume onto fewer workers


def test_a_worker_trains_the_members_of_a_larger_run_in_turn():
    # A run of 4 workers resumed on 2: worker 0 trains members 0 and 2, the one with fewer intervals first.
    done = [interval(1, 0, 0, 0.5), interval(2, 0, 1, 0.4, parent=1), interval(3, 2, 0, 0.3)]
    done += [interval(4, 1, 0, 0.2), interval(5, 3, 0, 0.1)]
    propagator = PopulationBasedTraining(
        LIMITS, random.Random(0), perturbation_interval=2, quantile_fraction=0
    )
    propagator.bind(0, 2)
    for ind in done:
        propagator.observe(ind)
    (ind,) = propagator(done)
    assert (ind["_member"], ind["_interval"], ind["_parent"], ind["_start"]) == (2, 1, 3, 2)
    assert propagator.states.members == {0, 2}
    after = interval(6, 2, 1, 0.2, parent=3)
    propagator.observe(after)
    (ind,) = propagator([*done, after])
    assert (ind["_member"], ind["_interval"], ind["_parent"]) == (0, 2, 2)


def test_a_lineage_that_left_the_individuals_given_says_on_which_island():
    run = two_islands()
    carried = migrant(7, 1, 0, 1, [[2, 0.5], [4, 0.2]])
    carried["_parent"], carried["_emigrant"] = 100, 101
    island_zero = [ind for ind in run if ind.island == 0] + [carried]  # what a worker of island 0 holds
    with pytest.raises(KeyError, match="trained on island 1"):
        ancestry(island_zero, 3)


def test_the_schedule_of_a_run_of_two_islands_tells_their_members_apart():
    run = two_islands()
    carried = migrant(7, 1, 0, 1, [[2, 0.5], [4, 0.2]])
    carried["_parent"], carried["_emigrant"] = 100, 101
    # Island 0's member 0 ends best, after island 1's member 0 (same index) trained longer.
    assert [segment.uid for segment in schedule([*run, carried])] == [100, 101, 3]
