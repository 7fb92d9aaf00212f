"""A trainer that reports through callbacks, followed as a generator loss function: its fit runs in a thread.

Trainers such as PyTorch Lightning's ``Trainer`` and Hugging Face's ``Trainer`` own the training loop and tell
the outside world what happens through callbacks, while propulate follows an evaluation as a generator of
interim losses (:mod:`propulate.evaluation`). :func:`follow_trainer` joins the two: the trainer's ``fit`` runs
in a helper thread, and at each evaluation of the model the trainer's callback hands the metric to the main
thread (:meth:`Reporter.report`) and waits there. The main thread yields it as the loss function's next
interim loss and answers once propulate has decided: go on, or end the training (pruned by the surrogate,
stopped at a commit, a failure on another rank). So everything propulate does with interim losses applies
unchanged: the worker's ranks agree after each one, the state saved for it is committed, the surrogate prunes,
stops and the time limit interrupt; signals keep reaching the main thread, where propulate's handlers run; and
a verdict reaches every rank of a worker at the same evaluation of the model, so no rank leaves a collective
operation of the training early.

Ending a training. A verdict to end it (:meth:`Reporter.report` returns ``False``) lets the trainer end as its
own early stopping would (Lightning's ``trainer.should_stop``, Hugging Face's
``control.should_training_stop``); should it train on anyway, :meth:`Reporter.check`, called by the callback
before each batch, ends it by raising :class:`Halted` in the trainer's thread. An interruption (a stop
signal's grace period over, the time limit) reaches the main thread while the trainer's thread is in the
middle of an epoch: the thread is told to halt at its next batch and, with several ranks, the worker's process
group is aborted (``abandon``), so that a rank blocked in a collective operation with a partner that already
halted is released at once. The main thread waits until the trainer's thread has ended before the loss
function returns: no thread outlives its evaluation. An exception in the trainer's thread is raised again in
the main thread, as the loss function's failure on that rank, after ``abandon`` released its partners.

The worker's process group after a training that did not end cleanly may be gone on some of its ranks and
not on others: :func:`worker_group`, called at the start of each evaluation, makes the worker's ranks agree
on whether to keep it or to create a new one.
"""

from __future__ import annotations

import datetime
import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mpi4py import MPI

from ..errors import EvaluationInterrupted
from ..utils.distributed import (
    WorkerGroup,
    abort_worker_process_group,
    current_worker_group,
    init_worker_process_group,
)

__all__ = ["Halted", "Reporter", "follow_trainer", "worker_group"]

log = logging.getLogger("propulate")

#: Seconds between two looks of the main thread at the trainer's thread (a signal handler runs meanwhile).
POLL = 0.1
#: Seconds the main thread waits for the trainer's thread to end after it was told to, before it aborts the
#: worker's process group (the thread may wait in a collective operation for a partner that left) and warns.
HALT_TIMEOUT = 120.0

_REPORT, _DONE, _FAILED = "report", "done", "failed"


class Halted(BaseException):
    """Raised in the trainer's thread to end a training that propulate ended (pruned, stopped, interrupted).

    A ``BaseException``, so that a trainer or user code catching ``Exception`` does not swallow it.
    """


class Reporter:
    """The trainer thread's end of :func:`follow_trainer`: hands interim results over and takes verdicts.

    Made by :func:`follow_trainer` and given to its ``train`` function; the trainer's callback calls
    :meth:`report` after each evaluation of the model and :meth:`check` before each training batch.
    """

    def __init__(self) -> None:
        self._events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._verdicts: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._halted = threading.Event()

    @property
    def halted(self) -> bool:
        """Whether propulate ended the training: it must not train on."""
        return self._halted.is_set()

    def report(self, value: Any) -> bool:
        """Hand ``value`` (an interim loss, or a mapping with a ``"loss"``) over; return whether to go on.

        Blocks the trainer's thread until propulate has taken the value in (and, with several ranks, the
        worker's ranks have agreed on it and the saved state is committed). Returns ``False`` at once after
        the training was ended.
        """
        if self.halted:
            return False
        self._events.put((_REPORT, value))
        return self._verdicts.get() and not self.halted

    def check(self) -> None:
        """Raise :class:`Halted` if propulate ended the training; call it before each training batch."""
        if self.halted:
            raise Halted("propulate ended this training")

    # ---------------------------------------------------------------------------- the main thread's side

    def _answer(self, go_on: bool) -> None:
        if not go_on:
            self._halted.set()
        self._verdicts.put(go_on)

    def _next_event(self) -> tuple[str, Any]:
        """Wait for the trainer's thread to report, end or fail; a signal handler may raise meanwhile."""
        while True:
            try:
                return self._events.get(timeout=POLL)
            except queue.Empty:
                continue

    def _finished(self, kind: str, payload: Any = None) -> None:
        self._events.put((kind, payload))

    def _failure(self) -> BaseException | None:
        """Return the exception the trainer's thread ended with, if it is still unread, else ``None``."""
        while True:
            try:
                kind, payload = self._events.get_nowait()
            except queue.Empty:
                return None
            if kind == _FAILED:
                return payload


def follow_trainer(
    train: Callable[[Reporter], Any],
    abandon: Callable[[], None],
    *,
    name: str = "propulate-trainer",
) -> Iterator[Any]:
    """Run ``train`` in a helper thread and yield, in the main thread, each value its trainer reports.

    Use it as (or ``yield from`` it in) a generator loss function. ``train(reporter)`` builds nothing that
    needs the main thread and calls the trainer's ``fit``; the trainer's callback calls
    :meth:`Reporter.report` with each interim loss and :meth:`Reporter.check` before each batch.

    Parameters
    ----------
    train : callable (Reporter) -> Any
        Trains, in the helper thread; what it returns is not used.
    abandon : callable () -> None
        Releases the worker's other ranks from the training's collective operations (e.g.
        :func:`~propulate.utils.distributed.abort_worker_process_group`); called when the training ends
        without the worker agreeing on it: an exception in the trainer's thread, an interruption.
    name : str
        The helper thread's name, for stack dumps and logs.

    Yields
    ------
    Any
        What the trainer reports, in order.

    Raises
    ------
    BaseException
        What ``train`` raised in the helper thread (with its traceback), after ``abandon``.
    EvaluationInterrupted
        When propulate interrupts the evaluation, once the helper thread has ended.
    """
    reporter = Reporter()

    def run() -> None:
        try:
            train(reporter)
        except Halted:
            reporter._finished(_DONE)
        except BaseException as err:  # handed to the main thread, which raises it as the loss's failure
            reporter._finished(_FAILED, err)
        else:
            reporter._finished(_DONE)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    ended = False  # the training ended by itself or by an agreed verdict: the worker's group stays usable
    try:
        while True:
            kind, payload = reporter._next_event()
            if kind == _REPORT:
                yield payload
                reporter._answer(True)
            elif kind == _FAILED:
                raise payload  # the block below releases the partners before it leaves
            else:
                ended = True
                return
    except GeneratorExit:
        ended = True  # closed after the worker's ranks agreed on a verdict: all of them end here
        raise
    finally:
        with _interruptions_held():
            reporter._answer(False)
            if not ended:
                abandon()
            _wait_for(thread, abandon)
            late = reporter._failure()
            if ended and late is not None:
                # The training failed while ending on a verdict (a partner's collective broke, say): the
                # evaluation's outcome stands, but the group may be broken and is dropped.
                log.warning(f"rank {MPI.COMM_WORLD.rank}: the training failed while ending: {late!r}")
                abandon()


@contextmanager
def _interruptions_held() -> Iterator[None]:
    """Hold back propulate's interruptions (SIGALRM) in this thread until the block is left.

    Once an evaluation is interrupted, propulate's watchdog repeats the interruption every few milliseconds
    while the loss function runs. Ending the trainer's thread and aborting the worker's group must not be cut
    short by one (a thread left running, a group half aborted): a repeat arrives when the block is left, and
    ends the loss function then.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _wait_for(thread: threading.Thread, abandon: Callable[[], None]) -> None:
    """Wait until ``thread`` ended; take interruptions that arrive meanwhile in, and raise one at the end.

    An interruption of the evaluation that is not held back (:class:`EvaluationInterrupted`, raised by a
    second SIGINT) may arrive while the thread ends: the thread must end all the same, so it is raised once
    the thread has ended. A thread that does not end within :data:`HALT_TIMEOUT` seconds (blocked in a
    collective operation) is released by ``abandon``, then waited for again; one that still runs is left to
    the interpreter (a daemon thread), loudly.
    """
    interrupted: EvaluationInterrupted | None = None
    for attempt in range(2):
        waited = 0.0
        while thread.is_alive() and waited < HALT_TIMEOUT:
            try:
                thread.join(POLL)
                waited += POLL
            except EvaluationInterrupted as err:
                interrupted = interrupted or err
        if not thread.is_alive():
            break
        if attempt == 0:
            log.warning(
                f"rank {MPI.COMM_WORLD.rank}: the trainer's thread {thread.name} did not end within "
                f"{HALT_TIMEOUT:.0f} s of being told to; aborting the worker's process group"
            )
            abandon()
        else:
            log.error(
                f"rank {MPI.COMM_WORLD.rank}: the trainer's thread {thread.name} still runs; it is left "
                "behind (a daemon thread) and the worker's process group was aborted"
            )
    if interrupted is not None:
        raise interrupted


def worker_group(
    comm: MPI.Comm, method: str = "auto", timeout: datetime.timedelta = datetime.timedelta(minutes=10)
) -> WorkerGroup:
    """Return the worker's process group for a training, created anew if any of its ranks lost it.

    Collective over the worker's communicator ``comm``. A training that did not end cleanly aborts the group
    on the ranks where it failed or was interrupted, perhaps not on the others: the ranks agree here whether
    every one of them still holds the group, and if not, all of them drop theirs and create a new one (over
    a new rendezvous) with :func:`~propulate.utils.distributed.init_worker_process_group`, whose
    ``method`` and ``timeout`` apply.
    """
    held = current_worker_group() is not None
    if comm.Get_size() > 1 and not comm.allreduce(held, op=MPI.LAND):
        abort_worker_process_group()
    return init_worker_process_group(comm, method, timeout)
