"""What a tracker costs per evaluation: on the loop, and in its background thread.

One process, no MPI. The loop's cost is that of :meth:`propulate.trackers.runner.Tracking.evaluated` with one
tracker: making the evaluation's record (parameters copied, interim losses frozen) and putting it into the
tracker's queue. The thread's cost is that of each tracker's ``log_evaluation``, called directly, per
evaluation: a TensorBoard run written to a local folder, an MLflow nested run in the default SQLite store
(the checkpoint folder's), and the start of each (MLflow: importing it, creating the database). Evaluations
have 5 parameters and, with ``--steps``, as many interim losses each. Run::

    PYTHONPATH=. python benchmarks/trackers_overhead.py --evaluations 200 --steps 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from propulate.individual import Individual, Status
from propulate.trackers import EvaluationRecord, MLflowTracker, SearchInfo, TensorBoardTracker, Tracker
from propulate.trackers.runner import Tracking

LIMITS = {
    "lr": (1e-4, 1e-1),
    "layers": (1, 8),
    "width": (16, 512),
    "dropout": (0.0, 0.5),
    "act": ("relu", "gelu"),
}


class Nothing(Tracker):
    def log_evaluation(self, record: EvaluationRecord) -> None:
        pass


def individuals(count: int, steps: int) -> list[tuple[Individual, list[tuple[float, dict[str, float]]]]]:
    made = []
    for uid in range(count):
        ind = Individual({"lr": 0.01, "layers": 3, "width": 64, "dropout": 0.1, "act": "relu"}, LIMITS)
        ind.uid, ind.island, ind.rank, ind.generation, ind.status = uid, 0, 0, uid, Status.COMPLETED
        ind.loss, ind.metrics, ind.evaltime, ind.evalperiod = 0.5, {"accuracy": 0.9}, time.time(), 1.0
        made.append((ind, [(1.0 / k, {"accuracy": 0.1 * k}) for k in range(1, steps + 1)]))
    return made


def search(folder: Path) -> SearchInfo:
    return SearchInfo(str(folder), "bench", folder, ("loss",), 0, 0, 0, 0, 1, 1, 1)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--evaluations", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    runs = individuals(args.evaluations, args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tracking = Tracking([Nothing()])
        tracking.start(search(folder))
        began = time.perf_counter()
        for ind, interim in runs:
            tracking.evaluated(lambda ind=ind, interim=interim: EvaluationRecord.of(ind, interim))
        loop = (time.perf_counter() - began) / len(runs)
        tracking.close(None)
        print(f"{len(runs)} evaluations, {args.steps} interim losses each")
        print(f"loop, per evaluation (record + queue): {loop * 1e6:8.1f} µs")
        records = [EvaluationRecord.of(ind, interim) for ind, interim in runs]
        for tracker in (TensorBoardTracker(), MLflowTracker()):
            began = time.perf_counter()
            tracker.start(search(folder))
            started = time.perf_counter() - began
            began = time.perf_counter()
            for record in records:
                tracker.log_evaluation(record)
            each = (time.perf_counter() - began) / len(records)
            tracker.finish(None)
            name = type(tracker).__name__
            print(f"{name:>18}: start {started:6.2f} s, per evaluation {each * 1e3:7.2f} ms (its thread)")


if __name__ == "__main__":
    main()
