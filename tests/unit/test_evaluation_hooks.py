"""What an evaluator asks of the run around it, given as one typed object at construction (one rank)."""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

from propulate import Individual, Status
from propulate.evaluation import NO_HOOKS, Evaluation, EvaluationHooks, Evaluator, FailureLog
from propulate.surrogate import Surrogate

LIMITS = {"x": (0.0, 1.0)}


class Sharing(Surrogate):
    """Shares a rung result after every interim loss and never cancels."""

    def __init__(self) -> None:
        self.merged: list[Any] = []

    def cancel(self, loss: float) -> bool:
        return False

    def interim_data(self) -> Any:
        return {"rung": 1}

    def merge(self, data: Any) -> None:
        self.merged.append(data)


def curve(ind: Individual):
    for k in range(3):
        yield ind["x"] + 1.0 / (k + 1)


def test_without_hooks_nothing_is_asked() -> None:
    evaluator = Evaluator(curve, MPI.COMM_SELF, surrogate=Sharing())
    assert evaluator.hooks is NO_HOOKS
    assert evaluator(Individual({"x": 0.5}, LIMITS)).status is Status.COMPLETED


def test_the_surrogate_hears_the_news_before_each_decision_and_shares_its_interim_data() -> None:
    calls: list[str] = []
    shared: list[Any] = []
    hooks = EvaluationHooks(take_news=lambda: calls.append("news"), share=shared.append)
    outcome = Evaluator(curve, MPI.COMM_SELF, surrogate=Sharing(), hooks=hooks)(
        Individual({"x": 0.5}, LIMITS)
    )
    assert outcome.status is Status.COMPLETED and outcome.steps == 3
    assert calls == ["news"] * 3
    assert shared == [{"rung": 1}] * 3


def test_an_interrupting_run_interrupts_between_two_steps() -> None:
    hooks = EvaluationHooks(interrupting=lambda: True)
    outcome = Evaluator(curve, MPI.COMM_SELF, hooks=hooks)(Individual({"x": 0.5}, LIMITS))
    assert outcome.status is Status.INTERRUPTED


def test_an_outcome_is_noted_on_the_individual_with_its_error(caplog) -> None:
    ind = Individual({"x": 0.5}, LIMITS)
    Evaluation(float("nan"), Status.FAILED, {"acc": 1.0}, 0.25, "Traceback\nValueError: no", 2).apply_to(ind)
    assert (ind.status, ind.evalperiod, ind.steps, ind.metrics) == (Status.FAILED, 0.25, 2, {"acc": 1.0})
    assert ind.error is not None and ind.error.endswith("ValueError: no")
    refused = Evaluation(
        float("nan"), Status.FAILED, error="Traceback\nLayoutError: two ranks", misconfigured=True
    )
    assert refused.refusal == "LayoutError: two ranks" and Evaluation(1.0).refusal == ""
    failures = FailureLog("Island 0, worker 1")
    failures.failed(ind, "Traceback\nValueError: no")
    failures.failed(ind, "Traceback\nValueError: no")
    assert "Traceback" in caplog.records[0].getMessage()
    assert "as before; traceback not repeated" in caplog.records[1].getMessage()
