"""Generator loss functions and the surrogate hooks, on one rank (no mpiexec needed)."""

from __future__ import annotations

import functools
import json
import math

import pytest
from mpi4py import MPI

from propulate import Individual, Status
from propulate.evaluation import Evaluator, is_generator, make_surrogate
from propulate.surrogate import NullSurrogate, StaticSurrogate, Surrogate

LIMITS = {"x": (0.0, 1.0)}


def individual(x=0.5):
    return Individual({"x": x}, LIMITS)


def curve(params, epochs=5, offset=0.0):
    for k in range(epochs):
        yield params["x"] + offset + 1.0 / (k + 1)


class CancelAt(Surrogate):
    """Cancels at a fixed step and records every call."""

    def __init__(self, step):
        self.step = step
        self.calls = []

    def start_run(self, ind):
        self.calls.append(("start_run", ind["x"]))
        self.k = 0

    def cancel(self, loss):
        self.calls.append(("cancel", loss))
        self.k += 1
        return self.k - 1 == self.step

    def update(self, loss):
        self.calls.append(("update", loss))

    def data(self):
        return {"k": self.k}


class Epochs:
    """A callable object whose __call__ is a generator."""

    def __call__(self, params):
        yield from curve(params, 3)


def evaluate(loss_fn, surrogate=None, ind=None, **kwargs):
    evaluator = Evaluator(loss_fn, MPI.COMM_SELF, surrogate=surrogate, **kwargs)
    outcome = evaluator(ind or individual())
    return evaluator, outcome


def test_plain_loss_has_no_steps_and_never_asks_the_surrogate():
    surrogate = CancelAt(0)
    evaluator, outcome = evaluate(lambda p: p["x"] ** 2, surrogate)
    assert outcome.status is Status.COMPLETED
    assert outcome.steps == 0
    assert outcome.loss == 0.25
    assert surrogate.calls == []
    assert evaluator.learn(outcome) is None


@pytest.mark.parametrize(
    "loss_fn",
    [
        curve,
        functools.partial(curve, epochs=5),
        functools.partial(functools.partial(curve, offset=0.0), epochs=5),
        lambda p: curve(p),
        Epochs(),
    ],
    ids=["function", "partial", "nested-partial", "lambda-returning-generator", "callable-object"],
)
def test_generator_losses_are_followed_to_their_last_value(loss_fn):
    _, outcome = evaluate(loss_fn)
    epochs = 3 if isinstance(loss_fn, Epochs) else 5
    assert outcome.status is Status.COMPLETED
    assert outcome.steps == epochs
    assert outcome.loss == pytest.approx(0.5 + 1.0 / epochs)


def test_interim_mappings_carry_metrics():
    def loss_fn(params):
        for k in range(3):
            yield {"loss": 1.0 / (k + 1), "accuracy": 0.5 + k / 10}

    _, outcome = evaluate(loss_fn)
    assert outcome.loss == pytest.approx(1 / 3)
    assert outcome.metrics == {"accuracy": pytest.approx(0.7)}


def test_a_cancelled_evaluation_is_pruned_keeps_its_interim_loss_and_is_closed():
    closed = []

    def loss_fn(params):
        try:
            yield from curve(params, 10)
        finally:
            closed.append(True)  # e.g. release a GPU, close a data loader

    surrogate = CancelAt(2)
    evaluator, outcome = evaluate(loss_fn, surrogate)
    assert outcome.status is Status.PRUNED
    assert outcome.steps == 3
    assert outcome.loss == pytest.approx(0.5 + 1 / 3)
    assert closed == [True]
    assert surrogate.calls == [("start_run", 0.5), ("cancel", 1.5), ("cancel", 1.0), ("cancel", outcome.loss)]
    # A pruned run is shared but does not update the surrogate.
    assert evaluator.learn(outcome) == {"k": 3}
    assert ("update", outcome.loss) not in surrogate.calls


def test_a_completed_generator_updates_the_surrogate_with_its_final_loss():
    surrogate = CancelAt(-1)
    evaluator, outcome = evaluate(curve, surrogate)
    assert outcome.status is Status.COMPLETED
    assert evaluator.learn(outcome) == {"k": 5}
    assert surrogate.calls[-1] == ("update", outcome.loss)


def test_a_generator_that_raises_fails_with_its_traceback():
    def loss_fn(params):
        yield 1.0
        raise RuntimeError("diverged at epoch 2")

    evaluator, outcome = evaluate(loss_fn, CancelAt(-1))
    assert outcome.status is Status.FAILED
    assert "diverged at epoch 2" in outcome.error
    assert outcome.steps == 1
    assert evaluator.learn(outcome) is None


def test_an_empty_generator_fails():
    def loss_fn(params):
        return
        yield

    _, outcome = evaluate(loss_fn)
    assert outcome.status is Status.FAILED
    assert "yielded nothing" in outcome.error


def test_a_nan_interim_loss_is_judged_by_the_final_one():
    def recovers(params):
        yield math.nan
        yield 0.3

    _, outcome = evaluate(recovers)
    assert outcome.status is Status.COMPLETED
    assert outcome.loss == 0.3


def test_a_run_pruned_at_a_nan_loss_fails_instead():
    def diverges(params):
        yield 1.0
        yield math.nan
        yield 0.1

    _, outcome = evaluate(diverges, StaticSurrogateWithBaseline())
    assert outcome.status is Status.FAILED
    assert math.isnan(outcome.loss)


def StaticSurrogateWithBaseline():  # noqa: N802 (reads like a class at the call site)
    surrogate = StaticSurrogate()
    surrogate.start_run(individual(0.1))
    for loss in (1.0, 0.5, 0.2):
        assert not surrogate.cancel(loss)
    surrogate.update(0.2)
    return surrogate


def test_static_surrogate_stops_a_clearly_worse_run_early():
    _, outcome = evaluate(functools.partial(curve, offset=10.0), StaticSurrogateWithBaseline())
    assert outcome.status is Status.PRUNED
    assert outcome.steps == 1


def test_a_broken_surrogate_raises_out_of_the_evaluation():
    # Raised, not ignored: the run then fails on every rank with an error naming this one (tests/mpi).
    class Broken(Surrogate):
        def cancel(self, loss):
            raise ZeroDivisionError("surrogate bug")

    with pytest.raises(ZeroDivisionError, match="surrogate bug"):
        evaluate(curve, Broken())


def test_surrogate_data_that_is_not_json_is_not_shared(caplog):
    class Opaque(NullSurrogate):
        def data(self):
            return {"curve": object()}

    evaluator, outcome = evaluate(curve, Opaque())
    with caplog.at_level("ERROR", logger="propulate"):
        assert evaluator.learn(outcome) is None
    assert "not JSON-serializable" in caplog.text


def test_static_surrogate_data_is_json():
    evaluator, outcome = evaluate(curve, StaticSurrogate())
    data = evaluator.learn(outcome)
    assert json.loads(json.dumps(data)) == data


def test_is_generator():
    assert is_generator(curve({"x": 0.0}))
    assert is_generator(iter([1.0]))
    assert not is_generator(1.0)
    assert not is_generator({"loss": 1.0})
    assert not is_generator([1.0])


def test_make_surrogate():
    assert isinstance(make_surrogate(None), NullSurrogate)
    assert isinstance(make_surrogate(StaticSurrogate), StaticSurrogate)
    with pytest.raises(TypeError, match="surrogate_factory"):
        make_surrogate(StaticSurrogate())
    with pytest.raises(TypeError, match="surrogate_factory"):
        make_surrogate(lambda: 3)
