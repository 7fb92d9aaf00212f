"""One rank's part in stopping a run, on one process (the alarm over COMM_SELF)."""

from __future__ import annotations

import time

import pytest
from mpi4py import MPI

from propulate.errors import WorkerFailedError
from propulate.lifecycle import STEP_MARGIN, StopCoordinator, on_release, release_evaluation
from propulate.mpi.alarm import FailureReport


@pytest.fixture
def stops():
    coordinator = StopCoordinator(lambda: False, grace_period=5.0, time_limit=None)
    coordinator.begin(MPI.COMM_SELF, MPI.COMM_SELF)
    yield coordinator
    coordinator.close()


def test_nothing_stops_a_run_without_a_reason(stops) -> None:
    with stops.conditions:
        assert not stops.should_stop(1.0)
        assert not stops.stopping() and stops.reason is None
        assert not stops.interrupting() and not stops.stop_soon(1.0)
        stops.settle()
    assert (stops.reason, stops.abort) == (None, False)


def test_a_request_stops_the_worker_keeps_the_first_reason_and_an_abort_adds_to_it(stops) -> None:
    with stops.conditions:
        stops.request("enough")
        stops.request("failed", abort=True)
        assert stops.should_stop(0.0) and stops.stopping()
        stops.settle()
    assert (stops.reason, stops.abort) == ("enough", True)
    assert stops.stop_soon(0.0) is False  # the conditions themselves did not stop


def test_the_time_limit_stops_before_an_evaluation_that_would_not_end_in_time() -> None:
    stops = StopCoordinator(lambda: False, grace_period=5.0, time_limit=100.0)
    stops.begin(MPI.COMM_SELF, MPI.COMM_SELF)
    try:
        with stops.conditions:
            # Interrupted at 90 s (a margin of 10 %): an evaluation starts if 1.5 times its mean ends before.
            assert not stops.should_stop(1.0) and not stops.should_stop(55.0)
            assert stops.should_stop(65.0), "65 s fit before the interruption, 1.5 times 65 s do not"
            assert stops.reason == "the time limit is near"
            assert stops.stop_soon(95.0 / STEP_MARGIN)
    finally:
        stops.close()


def test_a_new_run_forgets_the_last_stop(stops) -> None:
    stops.request("enough")
    stops.close()
    stops.begin(MPI.COMM_SELF, MPI.COMM_SELF)
    assert stops.reason is None and not stops.abort


def test_another_ranks_failure_is_raised_by_check(stops) -> None:
    stops.alarm.failure = FailureReport(MPI.COMM_WORLD.rank + 1, "elsewhere", "propulate()", "Boom")
    with pytest.raises(WorkerFailedError, match="elsewhere"):
        stops.check()


def test_the_interruption_is_due_at_its_moment(stops) -> None:
    with stops.conditions:
        stops.conditions.stop("signal", grace=0.0)
        time.sleep(0.001)
        assert stops.interrupting() and stops.stop_soon(0.0)


def test_registered_releases_run_once_each() -> None:
    calls: list[int] = []

    def release() -> None:
        calls.append(1)

    on_release(release)
    on_release(release)
    release_evaluation()
    assert calls == [1]
