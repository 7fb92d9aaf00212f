"""Cases that share a launch (``conftest.Cases``): one that fails is reported once, not by all after it."""

from __future__ import annotations

from .conftest import Cases


def test_the_cases_after_a_failed_one_run_in_a_new_launch(tmp_path) -> None:
    names = ["first", "fails", "after", "fails-too", "last"]
    codes = {"fails": 3, "fails-too": 4}
    cases = Cases("exit_with.py", {n: (2, ["--code", str(codes.get(n, 0))]) for n in names}, tmp_path, 30)
    outcomes = {name: cases(name) for name in names}
    assert {name: out.returncode for name, out in outcomes.items()} == {
        "first": 0,
        "fails": 3,
        "after": 0,
        "fails-too": 4,
        "last": 0,
    }
    assert all("RAN on 2 ranks" in out.stdout for out in outcomes.values())
    assert len(cases._launches[2]) == 3  # one launch, then one after each failure
