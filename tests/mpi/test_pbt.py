"""Population-based training under mpiexec: intervals counted, states traced from donor to member.

The program (programs/pbt_run.py) trains one number per member; each interval records the number it
started from and the one it ended with, so the test follows every state through the lineage: an interval
that exploited starts from exactly the number its donor's latest interval committed, one that continued
from exactly its own previous one, and every rank of a multi-rank member loaded the same. Each worker root
logs every step it trains, so the test counts steps: none trained twice, none missing, also after a stop.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from propulate import load_checkpoint
from propulate.checkpoint.evaluations import states
from propulate.checkpoint.format import uid_origin
from propulate.pbt import ancestry, histories, schedule
from propulate.report import load_dataframe

from .conftest import REPO

GENERATIONS = 4
INTERVAL = 2


def run(launcher, tmp_path: Path, n: int, *args: str, timeout: float = 120.0):
    ckpt = str(tmp_path / "ckpt")
    out = launcher("pbt_run.py", n, "--checkpoint", ckpt, *args, timeout=timeout)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    return (json.loads(lines[0][len("RESULT ") :]) if lines else None), out


def steps_trained(tmp_path: Path) -> Counter:
    """How often each (uid, step) was trained, from the worker roots' logs."""
    counts: Counter = Counter()
    for log in (tmp_path / "ckpt").glob("steps-*.log"):
        for line in log.read_text().splitlines():
            uid, step = line.split()
            counts[int(uid), int(step)] += 1
    return counts


def check(
    result,
    tmp_path: Path,
    workers: int,
    keep: int = 3,
    killed: bool = False,
    generations: int | None = GENERATIONS,
) -> int:
    """Assert the lineage, the traced states and the steps; return how many intervals exploited.

    ``workers`` members trained ``generations`` intervals each (``None``: as many as each got, from 0 on).

    ``killed``: a job was killed; per member it may have lost the interval under way, whose steps were then
    trained in vain (at most one step, if its start had reached the checkpoint: it continues from its last
    commit; all of them, if not: it is bred anew).
    """
    inds = {ind["uid"]: ind for ind in result["individuals"]}
    assert generations is None or len(inds) == workers * generations
    members: dict[int, list[int]] = {}
    exploits = 0
    for ind in inds.values():
        extras, metrics = ind["extras"], ind["metrics"]
        assert ind["status"] == "COMPLETED", ind
        members.setdefault(extras["_member"], []).append(extras["_interval"])
        assert ind["steps"] == extras["_until"] == extras["_start"] + INTERVAL, ind
        assert metrics["agree"] == 1.0, f"the ranks of member {extras['_member']} loaded different states"
        if extras["_parent"] < 0:
            assert extras["_interval"] == 0 and extras["_start"] == 0 and metrics["start"] == 0.0
            continue
        parent = inds[extras["_parent"]]
        # The state an interval started from is exactly the one its parent committed last (checksums).
        assert metrics["start"] == parent["metrics"]["w"], (ind, parent)
        assert metrics["loaded"] == parent["metrics"]["saved"] != 0.0, (ind, parent)
        assert extras["_start"] == parent["extras"]["_until"]
        if extras["_donor"] >= 0:
            exploits += 1
            assert parent["extras"]["_member"] == extras["_donor"] != extras["_member"]
        else:
            assert extras["_parent"] == extras["_previous"], ind
            assert parent["extras"]["_member"] == extras["_member"]
            # Continued with its configuration, unless the donor's state was gone (explored, own state).
            assert ind["lr"] == parent["lr"] or extras.get("_unavailable", -1) >= 0, ind
    assert sorted(members) == list(range(workers))
    for intervals in members.values():
        assert sorted(intervals) == list(range(len(intervals) if generations is None else generations)), (
            members
        )
    every = steps_trained(tmp_path)
    lost = Counter(uid for uid, _ in every if uid not in inds)
    assert not lost or killed, lost
    assert all(steps <= INTERVAL for steps in lost.values()), lost
    assert len({uid_origin(uid)[1] for uid in lost}) == len(lost), f"a member lost two intervals: {lost}"
    trained = Counter({key: count for key, count in every.items() if key[0] in inds})
    twice = Counter(inds[uid]["extras"]["_member"] for (uid, _), count in trained.items() if count > 1)
    assert not twice or killed, twice
    assert all(count == 1 for count in twice.values()) and max(trained.values()) <= 2, twice
    assert not {uid_origin(uid)[1] for uid in lost} & set(twice), (lost, twice)
    expected = {
        (uid, s) for uid, ind in inds.items() for s in range(ind["extras"]["_start"] + 1, ind["steps"] + 1)
    }
    assert set(trained) == expected
    per_member = Counter(inds[uid]["extras"]["_member"] for uid, _ in trained)
    assert per_member == {member: len(found) * INTERVAL for member, found in members.items()}, per_member
    # Each member keeps the states of its latest `keep` intervals, and nothing else is left, no pin either.
    kept = Counter(inds[int(name)]["extras"]["_member"] for name in result["folders"])
    assert all(result["folders"].values()), result["folders"]
    assert all(count <= keep for count in kept.values()), kept
    assert result["pins"] == []
    return exploits


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_members_exploit_donors_committed_states(mpirun, tmp_path, n):
    """One member per rank; alone, a member trains its intervals from its own states and exploits nobody."""
    args = ["--generations", str(GENERATIONS), "--interval", str(INTERVAL)]
    result, out = run(mpirun, tmp_path, n, *args, timeout=240.0 if n > 4 else 120.0)
    assert result is not None, out.stdout[-3000:]
    exploits = check(result, tmp_path, n)
    if n == 1:
        assert exploits == 0
    else:
        assert exploits >= 1, "no member exploited another"
    # The lineage is in the checkpoint, read without MPI, and in the exported frame.
    population = load_checkpoint(tmp_path / "ckpt").population
    best = schedule(population)
    assert best[0].start == 0 and all(a.until == b.start for a, b in itertools.pairwise(best))
    assert best[-1].loss == min(history[-1].loss for history in histories(population).values())
    frame = load_dataframe(tmp_path / "ckpt").set_index("uid")
    for ind in result["individuals"]:
        row = frame.loc[ind["uid"]]
        for key in ("_member", "_interval", "_parent", "_donor", "_start", "_until"):
            assert row[f"user_attrs_{key}"] == ind["extras"][key]


def test_pb2_members_exploit_donors_committed_states_and_explore_inside_the_range(mpirun, tmp_path):
    """PB2 breeds as PBT does (the same lineage and states); its GP-chosen learning rates stay in range."""
    args = ["--generations", str(GENERATIONS), "--interval", str(INTERVAL), "--pb2"]
    result, out = run(mpirun, tmp_path, 4, *args)
    assert result is not None, out.stdout[-3000:]
    assert check(result, tmp_path, 4) >= 1, "no member exploited another"
    assert all(0.02 <= ind["lr"] <= 0.6 for ind in result["individuals"])


def test_two_rank_members_all_load_the_donors_state(mpirun, tmp_path):
    result, out = run(mpirun, tmp_path, 4, "--ranks-per-worker", "2", "--keep", "2")
    assert result is not None, out.stdout[-3000:]
    assert check(result, tmp_path, 2, keep=2) >= 1, "no member exploited another"


@pytest.mark.parametrize(("n", "ranks_per_worker"), [(1, 1), (2, 1), (4, 2), (8, 1)])
def test_three_stops_continue_every_member_from_its_last_commit(mpirun, tmp_path, n, ranks_per_worker):
    extra = ["--ranks-per-worker", str(ranks_per_worker)]
    done = 0
    for stop in ("1:0", "2:0", "3:0"):  # member 0's interval and step within it, one per job
        stopped, out = run(mpirun, tmp_path, n, "--stop-at", stop, *extra)
        assert "SIGTERM received" in out.stdout, (stop, out.stdout[-3000:])
        pending = [ind for inds in load_checkpoint(tmp_path / "ckpt").pending.values() for ind in inds]
        assert pending, f"the stop at {stop} interrupted no interval"
        assert done <= len(stopped["individuals"]) < n // ranks_per_worker * GENERATIONS
        done = len(stopped["individuals"])
    last, out = run(mpirun, tmp_path, n, *extra)
    assert last is not None, out.stdout[-3000:]
    # Every step of every member trained once over the four jobs, each interval from its parent's state.
    check(last, tmp_path, n // ranks_per_worker)


@pytest.mark.parametrize("n", [1, 4, 8])
def test_a_killed_run_loses_at_most_the_step_under_way_per_member(mpirun, mpilaunch, tmp_path, n):
    killed, out = run(mpilaunch, tmp_path, n, "--stop-at", "1:0", "--kill", "--step-seconds", "0.1")
    assert out.returncode != 0 and killed is None
    second, out = run(mpirun, tmp_path, n, timeout=240.0)
    assert second is not None, out.stdout[-3000:]
    check(second, tmp_path, n, killed=True)


def test_a_kill_in_the_middle_of_a_copy_keeps_the_donors_state_and_resumes_from_a_whole_one(
    mpirun, mpilaunch, tmp_path
):
    killed, out = run(mpilaunch, tmp_path, 4, "--kill-in-copy")
    assert out.returncode != 0 and killed is None
    base = tmp_path / "ckpt" / "evaluations"
    cut = [name for name in os.listdir(base) if (base / name / ".incoming").is_dir()]
    pinned = [
        name for name in os.listdir(base) if any(f.startswith(".pin-") for f in os.listdir(base / name))
    ]
    assert cut and pinned, sorted(os.listdir(base))
    for name in cut:  # half a copy, never in place
        assert not states(base / name), name
    for name in pinned:  # the donor's state stayed whole while it was copied
        (latest,) = states(base / name)
        assert sorted(os.listdir(base / name / latest[2])) == ["more.bin", "w.json"]
    second, out = run(mpirun, tmp_path, 4)
    assert second is not None, out.stdout[-3000:]
    check(second, tmp_path, 4, killed=True)  # each interval loaded exactly its parent's committed state
    inds = {ind["uid"]: ind for ind in second["individuals"]}
    resumed = [inds[int(name)] for name in cut if int(name) in inds]
    # The copies cut short were made again from the donor's state (or the interval never reached the
    # checkpoint and was bred anew).
    assert all(ind["extras"]["_donor"] >= 0 and "_unavailable" not in ind["extras"] for ind in resumed)


def test_three_stops_then_a_kill_then_a_resume_train_every_members_steps_once(mpirun, mpilaunch, tmp_path):
    """SIGTERM, SIGTERM, SIGTERM and SIGKILL in one sequence of jobs; every member's steps are exact."""
    generations = ["--generations", "5"]
    for stop in ("1:0", "2:0", "3:0"):
        _, out = run(mpirun, tmp_path, 4, "--stop-at", stop, *generations)
        assert "SIGTERM received" in out.stdout, (stop, out.stdout[-3000:])
    killed, out = run(mpilaunch, tmp_path, 4, "--stop-at", "4:0", "--kill", *generations)
    assert out.returncode != 0 and killed is None
    last, out = run(mpirun, tmp_path, 4, *generations)
    assert last is not None, out.stdout[-3000:]
    check(last, tmp_path, 4, killed=True, generations=5)


@pytest.mark.parametrize(("first", "then"), [(4, 2), (2, 4)])
def test_a_resume_onto_another_number_of_workers_continues_every_member(mpirun, tmp_path, first, then):
    """Stopped at 4 workers and resumed at 2, each worker trains two members; at 2 then 4, two start anew."""
    _, out = run(mpirun, tmp_path, first, "--stop-at", "1:0")
    assert "SIGTERM received" in out.stdout, out.stdout[-3000:]
    stopped = load_checkpoint(tmp_path / "ckpt")
    pending = [ind.uid for inds in stopped.pending.values() for ind in inds]
    assert pending, "the stop interrupted no interval"
    total = 4 * GENERATIONS  # 4 members of 4 intervals each, whichever worker trains them
    last, out = run(mpirun, tmp_path, then, "--generations", str(total // then))
    assert last is not None, out.stdout[-3000:]
    check(last, tmp_path, 4, generations=None)
    inds = {ind["uid"]: ind for ind in last["individuals"]}
    assert len(inds) == total
    # The intervals interrupted by the stop completed, each continuing from its last commit.
    assert all(inds[uid]["status"] == "COMPLETED" for uid in pending)
    session = max(uid_origin(uid)[0] for uid in inds)
    for member in range(4):  # every member trained on in the second job, whoever trains it now
        bred = [
            i
            for i in inds.values()
            if i["extras"]["_member"] == member and uid_origin(i["uid"])[0] == session
        ]
        assert bred, f"member {member} trained no interval after the resume"


@pytest.mark.torch
def test_the_tutorial_prints_the_best_schedule_lineage_and_epochs(mpirun, tmp_path):
    """tutorials/pbt_example.py: 2 members of 2 DDP ranks, 3 intervals of 1 epoch of 5 batches each."""
    pytest.importorskip("torchvision")
    tutorials = REPO / "tutorials"
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(tutorials)]), "PROPULATE_DATA_CACHE": str(tmp_path)}
    args = ["--checkpoint", str(tmp_path / "ckpt"), "--generations", "3", "--train-batches", "5"]
    out = mpirun(tutorials / "pbt_example.py", 4, *args, "--verbosity", "0", timeout=300, env=env).stdout
    assert "Schedule of the best member's network" in out, out[-3000:]
    assert re.search(r"^  member 0: .*\n  member 1: ", out, flags=re.MULTILINE), out[-3000:]
    assert "Epochs trained in all: 6 (this job)" in out
    population = load_checkpoint(tmp_path / "ckpt").population
    assert sorted(len(history) for history in histories(population).values()) == [3, 3]
    best = schedule(population)
    assert best[-1].until >= 3 and f"(validation loss {best[-1].loss:.4f})" in out


@pytest.mark.parametrize("n", [1, 4, 8])
def test_a_failing_member_copies_the_best_and_blocks_nobody(mpirun, tmp_path, n):
    """Alone, a member whose interval failed tries again from its own state."""
    member = min(1, n - 1)
    result, out = run(mpirun, tmp_path, n, "--fail", f"{member}:1", timeout=240.0)
    assert result is not None, out.stdout[-3000:]
    assert "this member's interval fails" in out.stdout
    inds = {ind["uid"]: ind for ind in result["individuals"]}
    assert len(inds) == n * GENERATIONS, "every member trained all its intervals, the failed one counted"
    (failed,) = [ind for ind in inds.values() if ind["status"] == "FAILED"]
    assert (failed["extras"]["_member"], failed["extras"]["_interval"]) == (member, 1)
    (after,) = [i for i in inds.values() if (i["extras"]["_member"], i["extras"]["_interval"]) == (member, 2)]
    parent = inds[after["extras"]["_parent"]]
    assert after["status"] == "COMPLETED" and after["metrics"]["loaded"] == parent["metrics"]["saved"], after
    if n == 1:
        assert after["extras"]["_donor"] == -1 and parent["extras"]["_interval"] == 0, after
    else:
        assert after["extras"]["_donor"] not in (-1, member), after
        assert parent["extras"]["_member"] == after["extras"]["_donor"]
    assert all(ind["status"] == "COMPLETED" for ind in inds.values() if ind is not failed)


def check_islands(result, tmp_path: Path, islands: int, members: int, keep: int = 3) -> int:
    """Assert every island's lineage, the states traced across islands, the steps and the folders left.

    Returns how many intervals exploited a migrant.
    """
    by_island = {int(j): {ind["uid"]: ind for ind in inds} for j, inds in result["islands"].items()}
    assert sorted(by_island) == list(range(islands))
    owners: dict[int, tuple] = {}  # folder uid -> whose states it counts among
    every_own = {}
    migrant_exploits = 0
    for j, inds in by_island.items():
        own = {uid: ind for uid, ind in inds.items() if ind["migration_steps"] == 0}
        assert {ind["island"] for ind in own.values()} == {j}
        intervals: dict[int, list[int]] = {}
        for ind in inds.values():
            extras, metrics = ind["extras"], ind["metrics"]
            assert ind["status"] == "COMPLETED", ind
            assert "_unavailable" not in extras, f"a state was gone before it was copied: {ind}"
            if ind["migration_steps"] > 0:  # a migrant: its state taken over into its own folder
                assert ind["island"] != j and extras["_state"] == ind["uid"], ind
                owners[ind["uid"]] = ("migrant", j, ind["island"], extras["_member"])
                continue
            owners[ind["uid"]] = ("own", j, extras["_member"])
            intervals.setdefault(extras["_member"], []).append(extras["_interval"])
            assert ind["steps"] == extras["_until"] == extras["_start"] + INTERVAL, ind
            assert metrics["agree"] == 1.0, f"the ranks of member {extras['_member']} loaded different states"
            if extras["_parent"] < 0:
                assert extras["_interval"] == 0 and extras["_start"] == 0 and metrics["loaded"] == 0.0
                continue
            parent = inds[extras["_parent"]]
            # The state an interval started from is exactly the one its parent committed last (checksums).
            assert metrics["loaded"] == parent["metrics"]["saved"] != 0.0, (ind, parent)
            assert metrics["start"] == parent["metrics"]["w"], (ind, parent)
            assert extras["_start"] == parent["extras"]["_until"]
            if parent["migration_steps"] > 0:
                migrant_exploits += 1
                origin_island = parent["island"]
                assert extras["_donor_island"] == origin_island != j, ind
                assert extras["_donor"] == parent["extras"]["_member"], ind
                # The migrant carried the state its member committed last on its own island.
                (emigrant,) = [
                    other
                    for other in by_island[origin_island].values()
                    if other["migration_steps"] == 0
                    and other["extras"]["_member"] == parent["extras"]["_member"]
                    and other["extras"]["_interval"] == parent["extras"]["_interval"]
                ]
                assert emigrant["metrics"]["saved"] == parent["metrics"]["saved"], (emigrant, parent)
                assert extras["_origin"] == emigrant["uid"] == parent["extras"]["_emigrant"], ind
            elif extras["_donor"] >= 0:
                assert parent["extras"]["_member"] == extras["_donor"] != extras["_member"], ind
                assert "_donor_island" not in extras
            else:  # continued its own training, also when its latest interval had left the island
                assert extras["_parent"] == extras["_previous"], ind
                assert parent["extras"]["_member"] == extras["_member"] and ind["lr"] == parent["lr"], ind
        assert sorted(intervals) == list(range(members)), intervals
        assert all(sorted(found) == list(range(GENERATIONS)) for found in intervals.values()), intervals
        every_own.update(own)
    trained = steps_trained(tmp_path)
    assert all(count == 1 for count in trained.values()), [k for k, c in trained.items() if c > 1]
    expected = {
        (uid, s)
        for uid, ind in every_own.items()
        for s in range(ind["extras"]["_start"] + 1, ind["steps"] + 1)
    }
    assert set(trained) == expected
    # At most `keep` states per member of an island, and per member of another island that sent migrants;
    # every folder left is an inheritable state, and no pin or lease is left behind.
    kept = Counter(owners[int(name)] for name in result["folders"])
    assert all(result["folders"].values()), result["folders"]
    assert all(count <= keep for count in kept.values()), kept
    assert result["pins"] == []
    return migrant_exploits


@pytest.mark.parametrize(
    ("n", "ranks_per_worker", "pollination"),
    [(4, 1, 1), (4, 1, 0), (8, 2, 1)],
    ids=["pollination", "migration", "2-rank"],
)
def test_members_exploit_migrants_from_the_other_island(mpirun, tmp_path, n, ranks_per_worker, pollination):
    """2 islands; island 0 trains 50 times slower, so its bottom members copy the migrants of island 1."""
    args = ["--num-islands", "2", "--migration-probability", "1.0", "--handicap"]
    args += ["--pollination", str(pollination), "--ranks-per-worker", str(ranks_per_worker)]
    result, out = run(mpirun, tmp_path, n, *args, timeout=240.0)
    assert result is not None, out.stdout[-3000:]
    members = n // ranks_per_worker // 2
    assert check_islands(result, tmp_path, 2, members) >= 1, "no member exploited a migrant"
    migrants = [ind for ind in result["islands"]["1"] if ind["migration_steps"] > 0]
    assert migrants and all(ind["island"] == 0 for ind in migrants), "island 0 sent no member"
    # The best member's schedule, read from the checkpoint, follows its state from step 0 across islands.
    population = load_checkpoint(tmp_path / "ckpt").population
    best = schedule(population)
    assert best[0].start == 0 and all(a.until == b.start for a, b in itertools.pairwise(best)), best
    crossed = next(ind for ind in population if ind.extras.get("_origin", -1) >= 0 and ind.island == 0)
    chain = ancestry(population, crossed.uid)
    assert chain[0].start == 0 and all(a.until == b.start for a, b in itertools.pairwise(chain)), chain
    assert crossed.extras["_origin"] in [segment.uid for segment in chain]


def test_each_island_runs_its_own_population(mpirun, tmp_path):
    result, out = run(mpirun, tmp_path, 4, "--num-islands", "2")
    assert result is not None, out.stdout[-3000:]
    inds = {ind["uid"]: ind for ind in result["individuals"]}
    assert {ind["island"] for ind in inds.values()} == {0}
    assert len(inds) == 2 * GENERATIONS
    for ind in inds.values():  # every parent, hence every donor, is of the same island
        parent = ind["extras"]["_parent"]
        assert parent < 0 or inds[parent]["metrics"]["w"] == ind["metrics"]["start"], ind


def test_two_islands_stopped_twice_resume_with_their_migrants(mpirun, tmp_path):
    """SIGTERM in the middle of island 0's intervals, twice; each job resumes the members and the migrants."""
    args = ["--num-islands", "2", "--migration-probability", "1.0", "--handicap"]
    for stop in ("1:0", "2:0"):
        _, out = run(mpirun, tmp_path, 4, "--stop-at", stop, *args)
        assert "SIGTERM received" in out.stdout, (stop, out.stdout[-3000:])
        pending = [ind for inds in load_checkpoint(tmp_path / "ckpt").pending.values() for ind in inds]
        assert pending, f"the stop at {stop} interrupted no interval"
    last, out = run(mpirun, tmp_path, 4, *args)
    assert last is not None, out.stdout[-3000:]
    check_islands(last, tmp_path, 2, 2)
