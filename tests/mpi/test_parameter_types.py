"""Every parameter type through a real island run at 1, 2, 4 and 8 ranks, and a resume of its checkpoint.

``programs/parameter_types_run.py`` asserts collectively that values of every type (a log range, a step,
``Categorical((True, False, None, 16, 2.5, "a"))``, ...) reach the loss function, every rank's population and
the checkpoint as declared, and that every rank reports the same ``best``, ``best_params``, ``best_loss`` and
``top(5)``, equal to the least loss of the populations and of the checkpoint. Here: a second session on the
same checkpoint resumes it and does at least as well, and multi-rank workers agree too.
"""

from __future__ import annotations

import json

import pytest

from .conftest import Cases

SESSIONS = [(propagator, ranks) for propagator in ("default", "tpe") for ranks in (1, 2, 4, 8)]
PROPAGATORS = ["default", "tpe"]


def session_args(propagator: str, ranks: int, generations: int) -> list[str]:
    layout = ["--num-islands", str(min(ranks, 2)), *(["--pollination"] if ranks == 8 else [])]
    folder = f"{{tmp}}/{propagator}-{ranks}"
    return ["--checkpoint", folder, "--generations", str(generations), *layout, "--propagator", propagator]


FIRST: dict[str, tuple[int, list[str]]] = {
    f"{propagator}-{ranks}": (ranks, session_args(propagator, ranks, 15)) for propagator, ranks in SESSIONS
}
for propagator in PROPAGATORS:
    args = ["--ranks-per-worker", "2", "--num-islands", "2", "--propagator", propagator]
    FIRST[f"sub-ranks-{propagator}"] = (
        4,
        ["--checkpoint", f"{{tmp}}/sub-ranks-{propagator}", "--generations", "15", *args],
    )


def result_of(out) -> dict:
    assert out.returncode == 0, f"exit code {out.returncode}; output:\n{out.stdout[-8000:]}"
    assert "OK" in out.stdout.splitlines(), out.stdout[-4000:]
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("parameter_types")


@pytest.fixture(scope="module")
def first(folder) -> Cases:
    """The first sessions, in one launch per rank count (4 launches instead of 10)."""
    return Cases("parameter_types_run.py", FIRST, folder, timeout=60)


@pytest.fixture(scope="module")
def resumed(first, folder) -> Cases:
    """The second sessions, each bounded by its first session's best loss: 4 launches instead of 8.

    A first session that failed gets no second one; its test fails on the first.
    """
    cases = {}
    for propagator, ranks in SESSIONS:
        name = f"{propagator}-{ranks}"
        out = first(name)
        line = next((line for line in out.stdout.splitlines() if line.startswith("RESULT ")), None)
        if out.returncode == 0 and line is not None:
            bound = repr(json.loads(line[len("RESULT ") :])["best_loss"])
            cases[name] = (ranks, [*session_args(propagator, ranks, 25), "--at-most", bound])
    return Cases("parameter_types_run.py", cases, folder, timeout=60)


@pytest.mark.parametrize(("propagator", "ranks"), SESSIONS)
def test_every_parameter_type_on_every_rank_then_resumed(first, resumed, ranks, propagator):
    one = result_of(first(f"{propagator}-{ranks}"))
    assert one["evaluations"] == 15 * ranks
    assert one["sessions"] == 1
    assert one["states"] == ["COMPLETE"]

    two = result_of(resumed(f"{propagator}-{ranks}"))
    assert two["evaluations"] == 25 * ranks, "the resumed session adds 10 evaluations per worker"
    assert two["sessions"] == 2
    assert two["best_loss"] <= one["best_loss"]
    if two["best_loss"] == one["best_loss"]:
        assert two["best_params"] == one["best_params"]


@pytest.mark.parametrize("propagator", PROPAGATORS)
def test_sub_ranks_of_two_rank_workers_see_the_same_best(first, propagator):
    result = result_of(first(f"sub-ranks-{propagator}"))
    assert result["evaluations"] == 15 * 2
