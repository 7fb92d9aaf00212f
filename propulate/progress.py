"""Live progress: one rate-limited line for the whole run, logged by the first rank.

Each island's first worker counts the evaluations of its island as they reach it (its own and those its
island peers announce), when the line is asked for (``debug >= 1``). It sends its island's counts and best
loss to the first rank of the run at most once per interval, in a small non-blocking message; the first
rank logs one line per interval: evaluations done and planned, best loss, evaluations per second and the
estimated time left. A run with 1,000 islands thus prints one line per interval, not 1,000. At the end of
the run each island's first worker reports once more, once it has taken in every evaluation of its island
(between the two drains of ``Propulator._finish``), so that the last line counts them all.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .individual import Individual, Status
from .lifecycle import seconds_from_environment
from .mpi.messaging import Mailbox, Tag
from .objectives import pareto_front
from .population import Population

log = logging.getLogger("propulate")

__all__ = ["Progress", "format_duration", "island_status", "progress_interval"]

_DONE = (Status.COMPLETED, Status.FAILED, Status.PRUNED)


@dataclass
class _IslandCounts:
    evaluated: int = 0  # since the run began, earlier sessions included
    this_session: int = 0
    best: float = math.inf


class Progress:
    """Counts an island's evaluations and reports the run's progress.

    Parameters
    ----------
    mailbox : Mailbox
        The mailbox over the communicator of all worker roots (rank 0 is the first rank of the run).
    island : int
        This worker's island.
    island_head : bool
        Whether this worker is its island's first worker (the one that reports).
    planned : int or None
        Evaluations planned for the whole run (generations × workers); ``None`` when it runs until stopped.
    interval : float
        Seconds between two progress lines (and between two reports of an island), > 0.
    loss_name : str
        What the line calls the loss: ``"loss"``, or with several objectives the first one's name (the
        best of it is shown, in minimized form).
    multi_objective : bool
        Whether the run has several objectives (an island's line then counts its Pareto front).
    """

    def __init__(
        self,
        mailbox: Mailbox,
        island: int,
        island_head: bool,
        planned: int | None,
        interval: float,
        loss_name: str = "loss",
        multi_objective: bool = False,
    ) -> None:
        self.loss_name = loss_name
        self.multi_objective = multi_objective
        self.mailbox = mailbox
        self.island = island
        self.island_head = island_head
        self.first_rank = mailbox.comm.rank == 0
        self.planned = planned
        self.interval = interval
        self.mine = _IslandCounts()
        self.islands: dict[int, _IslandCounts] = {}  # on the first rank: every island's latest report
        # Whether count() counts: only island heads report, and only a run with progress lines needs it.
        self.counting = island_head
        self._start = time.monotonic()
        self._next = -math.inf

    def begin(self, population: Iterable[Individual]) -> None:
        """Count what earlier sessions evaluated on this island (its own individuals, not immigrants)."""
        self.mine = _IslandCounts()
        self._tally(population)
        self.mine.this_session = 0
        self._start = time.monotonic()

    def count(self, individuals: Iterable[Individual]) -> None:
        """Count newly evaluated individuals of this island (immigrants are counted on their own island).

        Does nothing unless :attr:`counting` (an island head of a run that logs progress).
        """
        if self.counting:
            self._tally(individuals)

    def _tally(self, individuals: Iterable[Individual]) -> None:
        for ind in individuals:
            if ind.migration_steps == 0 and ind.status in _DONE:
                self.mine.evaluated += 1
                self.mine.this_session += 1
                self._offer(ind)

    def _offer(self, ind: Individual) -> None:
        if ind.status is not Status.FAILED and ind.loss < self.mine.best:
            self.mine.best = ind.loss

    def due(self) -> bool:
        """Whether the interval since the last line or report has passed (:meth:`tick` would act)."""
        return time.monotonic() >= self._next

    def tick(self) -> None:
        """After a generation: report, or log the line, if the interval has passed since the last time."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        self.report()
        if self.first_rank:
            self.receive()
            log.info(f"Progress: {self.line()}.")

    def island_line(self, what: str, population: Population, level: int = logging.INFO) -> None:
        """Island head: log ``Island <i>: <what>;`` and :func:`island_status` of ``population``."""
        if self.island_head:
            status = island_status(population, self.multi_objective, time.monotonic() - self._start)
            log.log(level, f"Island {self.island}: {what}; {status}.")

    def end(self, reason: str | None, population: Population, verbose: bool) -> None:
        """Island head, at the end of the run: that it stopped early (why), or with ``verbose`` that it ended.

        A stop is job-wide news: the run's first rank says it as a warning, the other heads at debug level.
        """
        if reason is not None:
            level = logging.WARNING if self.first_rank else logging.DEBUG
            self.island_line(f"stopped early ({reason})", population, level)
        elif verbose:
            self.island_line("done", population)

    def report(self) -> None:
        """Island heads other than the first rank: send the island's counts to the first rank."""
        if self.island_head and not self.first_rank:
            counts = (self.island, self.mine.evaluated, self.mine.this_session, self.mine.best)
            self.mailbox.send(counts, [0], Tag.PROGRESS)

    def receive(self) -> bool:
        """First rank: take in the islands' reports waiting in the mailbox; whether there were any."""
        messages = self.mailbox.receive(Tag.PROGRESS)
        for _, report in messages:
            self.take(report)
        return bool(messages)

    def take(self, report: tuple[int, int, int, float]) -> None:
        """First rank: note one island's report (as sent by :meth:`report`), taken in by the worker's poll."""
        island, evaluated, this_session, best = report
        self.islands[island] = _IslandCounts(evaluated, this_session, best)

    def line(self) -> str:
        """Return the progress line, from this island's counts and the other islands' latest reports."""
        islands = {**self.islands, self.island: self.mine}
        done = sum(c.evaluated for c in islands.values())
        this_session = sum(c.this_session for c in islands.values())
        best = min(c.best for c in islands.values())
        elapsed = time.monotonic() - self._start
        rate = this_session / elapsed if elapsed > 0 else 0.0
        parts = [f"{done:,} evaluations"]
        if self.planned:
            parts[0] = f"{done:,}/{self.planned:,} evaluations ({100.0 * done / self.planned:.1f} %)"
        parts.append(f"best {self.loss_name} {best:.6g}" if math.isfinite(best) else "no loss yet")
        parts.append(f"{rate:.3g} evaluations/s")
        if self.planned and rate > 0 and done < self.planned:
            parts.append(f"about {format_duration((self.planned - done) / rate)} left")
        parts.append(f"{format_duration(elapsed)} elapsed")
        return ", ".join(parts)


def format_duration(seconds: float) -> str:
    """Format a duration for people: ``"42 s"``, ``"3 min 5 s"``, ``"2 h 10 min"``, ``"3 d 4 h"``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def progress_interval() -> float:
    """Seconds between progress lines: ``PROPULATE_PROGRESS_INTERVAL``, else 10.

    Raises
    ------
    ValueError
        If the variable holds no positive number.
    """
    interval = seconds_from_environment("PROPULATE_PROGRESS_INTERVAL", 10.0)
    if interval is None or not interval > 0:
        raise ValueError(
            f"PROPULATE_PROGRESS_INTERVAL: expected a positive number of seconds, got {interval}"
        )
    return interval


def island_status(population: Population, multi_objective: bool, elapsed: float) -> str:
    """Return what an island's progress line says of its population: size, best loss or front, time."""
    if multi_objective:
        front = len(pareto_front(list(population)))
        return f"{population.n_known} individuals known, {front} on the Pareto front, {elapsed:.1f} s elapsed"
    best = population.best(1)
    best_loss = f"{best[0].loss:.6g}" if best else "n/a"
    return f"{population.n_known} individuals known, best loss {best_loss}, {elapsed:.1f} s elapsed"
