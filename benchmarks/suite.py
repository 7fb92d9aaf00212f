"""Run the overhead benchmarks under ``mpiexec`` and print the table of ``benchmarks/README.md``.

Each measurement is one ``mpiexec -n N python benchmarks/overhead.py ...`` (see that script); this driver
is a plain Python program that starts them one after the other, collects their JSON lines, prints them as
they come, and ends with a Markdown table and the four targets of the performance issue, each with the
figure measured and whether it holds:

1. 4 ranks, 5,000 generations, zero-cost loss, default propagator, checkpointing on: overhead per
   evaluation per worker at most 3x the floor measured in the same invocation (``--floor``);
2. 4 ranks: the overhead per evaluation at 20,000 generations at most 1.5x that at 500 generations;
3. 8 ranks, a loss that sleeps 10 ms: at least 95 % of the ideal throughput (8 / 10 ms), in a run of 500
   and one of 2,000 generations per worker (next to what the floor's loop reaches with the same sleep,
   with standard sends and with synchronous ones as the mailbox's);
4. resident memory growth per stored individual (10 float parameters) at most 2 KB (from the 20,000
   generation run: 80,000 individuals per rank); and, alongside, ``summarize`` over 100,000 individuals
   (4 ranks x 25,000 generations) in under a second, and ``python -m propulate report`` on that run's
   checkpoint (a figure, not a target).

It also prints how old the island peers' results are when a worker takes them in, in the 8-rank runs
(``--age`` of ``overhead.py``): how stale a worker's view of its island is when it breeds. And it runs the
10 ms case once on one rank, next to its floor: the same loop with no peer, no message and a core of its
own, which shows how much of the 8-rank shortfall the machine charges any loop woken from a 10 ms sleep.

``--scaling`` adds the runs behind the scaling analysis of ``docs/scaling.rst``: 2, 4, 8, 16 and 32 ranks,
one island of all ranks and islands of 4 ranks, each with its floor. Usage::

    python benchmarks/suite.py              # the targets, about 3 minutes on 2 cores
    python benchmarks/suite.py --scaling    # and the scaling runs, about 10 more minutes
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import mpijob

HERE = Path(__file__).resolve().parent

# Generations per worker of the scaling runs: a few seconds each on 2 cores.
SCALING_GENERATIONS = {2: 5000, 4: 2000, 8: 800, 16: 300, 32: 150}


def run_mpi(script: Path, ranks: int, options: list[str], timeout: float) -> tuple[int, str, float]:
    """Run ``script`` with ``options`` under ``mpiexec -n ranks``; return exit status, output, wall seconds.

    The benchmarks' drivers start their measurements this way (:func:`mpijob.run`): the repository first on
    ``PYTHONPATH``, unbuffered output (stdout and stderr together), one thread per BLAS library, the job in
    a session of its own. Past ``timeout`` seconds the job is sent SIGTERM (``mpiexec`` passes it on to the
    ranks), and its whole process tree is killed 30 s later; the status is then -1 and the output ends with
    a line that says so.
    """
    done = mpijob.run(script, ranks, options, timeout=timeout, grace=30.0, env=mpijob.ONE_BLAS_THREAD)
    if done.timed_out:
        return -1, done.output + f"\n(killed after {timeout:g} s)", done.seconds
    return done.returncode, done.output, done.seconds


def overhead(ranks: int, *options: str, timeout: float = 900.0) -> list[dict[str, Any]]:
    """Run ``overhead.py`` on ``ranks`` ranks; return its JSON lines (echoed as they come).

    Raises
    ------
    SystemExit
        If the run fails or takes longer than ``timeout`` seconds.
    """
    print(
        "$", " ".join(["mpiexec", "-n", str(ranks), "python", "benchmarks/overhead.py", *options]), flush=True
    )
    done = mpijob.run(HERE / "overhead.py", ranks, options, timeout=timeout, errors_apart=True)
    if done.timed_out:
        raise SystemExit(f"suite.py: {' '.join(done.command)} took more than {timeout:.0f} s")
    if done.returncode != 0:
        raise SystemExit(f"suite.py: {' '.join(done.command)} failed:\n{done.output}\n{done.errors}")
    lines = [json.loads(text) for text in done.output.splitlines() if text.startswith("{")]
    for line in lines:
        print(json.dumps(line), flush=True)
    return lines


def find(lines: list[dict[str, Any]], benchmark: str, **match: Any) -> dict[str, Any]:
    """The first line of ``benchmark`` whose entries equal ``match``."""
    for line in lines:
        if line.get("benchmark") == benchmark and all(line.get(k) == v for k, v in match.items()):
            return line
    raise KeyError(f"no {benchmark} line with {match}")


def row(line: dict[str, Any], floor: dict[str, Any] | None) -> str:
    """One Markdown table row of an overhead line (and the floor measured right before it).

    With a sleeping loss, the floor's figures are given less the sleep, as propulate's overhead is.
    """
    slept = 1e6 * line["sleep_s"]
    cells = [
        str(line["ranks"]),
        str(line["islands"]),
        f"{line['generations']:,}",
        f"{line['sleep_s'] * 1e3:g}",
        f"{floor['floor_us_per_evaluation_per_worker'] - slept:.0f}" if floor else "",
        f"{floor['loop_us_per_evaluation_per_worker'] - slept:.0f}" if floor else "",
        f"{line['overhead_us_per_evaluation_per_worker']:.0f}",
        f"{line['times_floor']:.2f}" if "times_floor" in line else "",
        f"{line['evaluations_per_second']:,.0f}",
        f"{line['messages_per_evaluation']:.2f}",
        f"{line['bytes_per_evaluation']:,.0f}",
        f"{line['peak_rss_bytes'] / 2**20:.0f}",
        f"{line['rss_growth_bytes_per_individual']:,.0f}",
        f"{line['checkpoint_bytes'] / 2**20:.1f}",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| ranks | islands | generations | sleep, ms | floor, µs | floor loop only, µs | overhead, µs "
    "| x floor | evaluations/s | messages/eval. | bytes/eval. | peak RSS/rank, MiB | RSS growth/ind., B "
    "| checkpoint, MiB |\n" + "| --- " * 14 + "|"
)


def paired(lines: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each overhead line with the floor line printed right before it (``--floor``), if any."""
    pairs = []
    floor = None
    for line in lines:
        if line["benchmark"] == "floor" and not line["synchronous"]:
            floor = line
        elif line["benchmark"] == "overhead":
            pairs.append((line, floor))
            floor = None
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scaling", action="store_true", help="also run 2 to 32 ranks for docs/scaling.rst")
    args = parser.parse_args()

    targets = overhead(4, "--floor", "--generations", "500", "5000", "20000", "--ratio")
    # 500 generations are a 5 s run, in which the start and the wait for the slowest worker's last
    # evaluation weigh about 1 %; 2,000 generations show the steady state.
    sleeping = overhead(
        8, "--floor", "--synchronous-floor", "--sleep", "0.01", "--generations", "500", "2000", "--age"
    )
    alone = overhead(1, "--floor", "--sleep", "0.01", "--generations", "2000")
    summary = overhead(4, "--generations", "25000", "--summary", "3", "--report")
    scaling: list[dict[str, Any]] = []
    if args.scaling:
        for ranks, generations in SCALING_GENERATIONS.items():
            scaling += overhead(ranks, "--floor", "--generations", str(generations))
            if ranks >= 8:
                scaling += overhead(
                    ranks, "--floor", "--islands", str(ranks // 4), "--generations", str(generations)
                )

    print("\n" + HEADER)
    for line, floor in paired(targets + sleeping + alone + summary + scaling):
        print(row(line, floor))

    at_5000 = find(targets, "overhead", generations=5000)
    ratio = find(targets, "overhead-ratio")["ratio_largest_to_smallest"]
    slept = {g: find(sleeping, "overhead", generations=g) for g in (500, 2000)}
    floor_loop = find(targets, "floor", generations=5000)["loop_us_per_evaluation_per_worker"]
    times_loop = at_5000["overhead_us_per_evaluation_per_worker"] / floor_loop
    growth = find(targets, "overhead", generations=20000)["rss_growth_bytes_per_individual"]
    seconds = find(summary, "overhead")["summary_seconds"]
    stored = find(summary, "overhead")["individuals_stored_per_rank"]
    checks = [
        (
            "overhead at 4 ranks x 5,000 generations <= 3x floor (until every message has arrived)",
            f"{at_5000['times_floor']:.2f}x",
            at_5000["times_floor"] <= 3,
        ),
        (
            "... <= 3x the floor's sending loop only (most of its messages not yet delivered)",
            f"{times_loop:.2f}x",
            times_loop <= 3,
        ),
        ("overhead 20,000 / 500 generations <= 1.5", f"{ratio:.2f}", ratio <= 1.5),
    ]
    checks += [
        (
            f"8 ranks, 10 ms loss, {g:,} generations: throughput >= 95 % of ideal",
            f"{100 * line['throughput_vs_ideal']:.1f} % "
            f"(the floor's loop: {100 * line['floor_throughput_vs_ideal']:.1f} %, with synchronous sends "
            f"as the mailbox's: {100 * line['synchronous_floor_throughput_vs_ideal']:.1f} %)",
            line["throughput_vs_ideal"] >= 0.95,
        )
        for g, line in slept.items()
    ]
    checks += [
        ("RSS growth per stored individual <= 2 KB", f"{growth:,.0f} B", growth <= 2048),
        (f"summarize over {stored:,} individuals < 1 s", f"{seconds:.3f} s", seconds < 1),
    ]
    print("\n| target | measured | holds |\n| --- | --- | --- |")
    for name, measured, holds in checks:
        print(f"| {name} | {measured} | {'yes' if holds else 'NO'} |")
    steady = slept[2000]
    print(
        "\nAge of peers' results when a worker takes them in (8 ranks, 10 ms loss, 2,000 generations): "
        f"mean {steady['result_age_ms_mean']:.1f} ms, 90th percentile {steady['result_age_ms_p90']:.1f} ms, "
        f"max {steady['result_age_ms_max']:.1f} ms."
    )
    single = find(alone, "overhead")
    print(
        "One rank alone, 10 ms loss, 2,000 generations (no peer, no message, a core of its own): "
        f"{100 * single['throughput_vs_ideal']:.1f} % of the ideal, its floor's loop "
        f"{100 * single['floor_throughput_vs_ideal']:.1f} %."
    )
    report = find(summary, "overhead")
    print(
        f"`python -m propulate report` on the checkpoint of {report['report_rows']:,} evaluations: "
        f"{report['report_seconds']:.2f} s (a fresh process: interpreter start and imports included)."
    )


if __name__ == "__main__":
    main()
