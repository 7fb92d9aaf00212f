"""Every parameter type through a real island run at 1, 2, 4 and 8 ranks, and a resume of its checkpoint.

``programs/parameter_types_run.py`` asserts collectively that values of every type (a log range, a step,
``Categorical((True, False, None, 16, 2.5, "a"))``, ...) reach the loss function, every rank's population and
the checkpoint as declared, and that every rank reports the same ``best``, ``best_params``, ``best_loss`` and
``top(5)``, equal to the least loss of the populations and of the checkpoint. Here: a second session on the
same checkpoint resumes it and does at least as well, and multi-rank workers agree too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def session(mpirun, ranks: int, checkpoint: Path, generations: int, *extra: str) -> dict:
    args = ["--checkpoint", str(checkpoint), "--generations", str(generations), *extra]
    out = mpirun("parameter_types_run.py", ranks, *args, timeout=60).stdout
    assert "OK" in out.splitlines(), out[-4000:]
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.mark.parametrize("propagator", ["default", "tpe"])
@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_every_parameter_type_on_every_rank_then_resumed(mpirun, ranks, propagator, tmp_path):
    layout = ["--num-islands", str(min(ranks, 2)), *(["--pollination"] if ranks == 8 else [])]
    layout += ["--propagator", propagator]
    first = session(mpirun, ranks, tmp_path, 15, *layout)
    assert first["evaluations"] == 15 * ranks
    assert first["sessions"] == 1
    assert first["states"] == ["COMPLETE"]

    second = session(mpirun, ranks, tmp_path, 25, *layout, "--at-most", repr(first["best_loss"]))
    assert second["evaluations"] == 25 * ranks, "the resumed session adds 10 evaluations per worker"
    assert second["sessions"] == 2
    assert second["best_loss"] <= first["best_loss"]
    if second["best_loss"] == first["best_loss"]:
        assert second["best_params"] == first["best_params"]


@pytest.mark.parametrize("propagator", ["default", "tpe"])
def test_sub_ranks_of_two_rank_workers_see_the_same_best(mpirun, propagator, tmp_path):
    layout = ["--ranks-per-worker", "2", "--num-islands", "2", "--propagator", propagator]
    result = session(mpirun, 4, tmp_path, 15, *layout)
    assert result["evaluations"] == 15 * 2
