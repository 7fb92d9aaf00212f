"""What a process pays to run again after it slept: the same Python work, timed after sleeps of each length.

A worker whose loss function sleeps (or waits for a GPU) comes back to caches and, on a virtual machine, a
processor that others used meanwhile. This script times a fixed piece of Python work (unpickling and
sorting a list of 50 small dicts, ``--work`` times) right after ``time.sleep(s)`` for each ``s`` of
``--sleeps``, ``--repeats`` times each, and prints one JSON line per sleep: the processor time of the work
(``thread_time``, µs, mean and median) and its excess over the mean after the shortest sleep given (no
sleep by default). On the 2-core virtual machine of ``README.md`` the excess after 10 ms is 60 to 100 µs
however often the work is repeated: the price is paid on the first touch of its code and data after the
sleep. Every evaluation of the 8-rank, 10 ms benchmark pays it, in the loop between two evaluations, on
everything that loop touches. Usage::

    python benchmarks/wake_cost.py
    python benchmarks/wake_cost.py --sleeps 0 0.001 0.01 0.1 --work 1 10
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleeps", type=float, nargs="+", default=[0.0, 0.001, 0.01], help="seconds")
    parser.add_argument("--work", type=int, nargs="+", default=[3], help="units of work after each sleep")
    parser.add_argument("--repeats", type=int, default=200, help="wake-ups per sleep length")
    args = parser.parse_args()
    if min(args.sleeps) < 0 or min(args.work) < 1 or args.repeats < 1:
        parser.error("--sleeps must be non-negative, --work and --repeats positive")
    data = pickle.dumps([{"uid": i, "loss": float(i), "position": [1.0, 2.0, 3.0]} for i in range(50)])

    def work(units: int) -> None:
        for _ in range(units):
            sorted(pickle.loads(data), key=lambda row: row["loss"])

    for units in args.work:
        baseline = None
        for sleep in sorted(args.sleeps):
            costs = []
            for _ in range(args.repeats):
                if sleep > 0:
                    time.sleep(sleep)
                start = time.thread_time()
                work(units)
                costs.append(1e6 * (time.thread_time() - start))
            mean = statistics.fmean(costs)
            if baseline is None:
                baseline = mean
            line = {
                "benchmark": "wake_cost",
                "sleep_s": sleep,
                "work_units": units,
                "cpu_us_mean": mean,
                "cpu_us_median": statistics.median(costs),
                "excess_us": mean - baseline,
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
