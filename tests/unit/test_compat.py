"""What scripts written for Propulate 1.2.2 rely on, on one process (see docs/compatibility.rst).

The names and module paths they import, the signatures they call positionally, the individual's mapping with
``_``-prefixed entries, 1.2.2's ``Gaussian`` propagator, and the error for the GP surrogate's optional
dependency. The behaviours that need MPI (the checkpoint at construction, entries travelling between
workers) are in ``tests/mpi/test_compat.py``.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest

from propulate import Individual
from propulate.checkpoint.format import decode_extras, encode_extras
from propulate.propagators.base import Gaussian

# The names of Propulate 1.2.2's ``propulate/__init__.py``.
TOP_LEVEL = [
    "Islands",
    "Individual",
    "Propulator",
    "Surrogate",
    "Migrator",
    "Pollinator",
    "get_default_propagator",
    "set_logger_config",
    "propagators",
]

# (module, name) pairs that 1.2.2's tutorials, tests and documentation import.
MODULE_PATHS = [
    ("propulate.population", "Individual"),
    ("propulate.propulator", "Propulator"),
    ("propulate.islands", "Islands"),
    ("propulate.migrator", "Migrator"),
    ("propulate.pollinator", "Pollinator"),
    ("propulate.surrogate", "Surrogate"),
    ("propulate.surrogate", "StaticSurrogate"),
    ("propulate.surrogate", "DynamicSurrogate"),
    ("propulate.propagators", "Propagator"),
    ("propulate.propagators", "Conditional"),
    ("propulate.propagators", "SelectMin"),
    ("propulate.propagators", "SelectMax"),
    ("propulate.propagators", "ParallelNelderMead"),
    ("propulate.propagators", "CMAPropagator"),
    ("propulate.propagators", "BasicCMA"),
    ("propulate.propagators", "ActiveCMA"),
    ("propulate.propagators", "CMAAdapter"),
    ("propulate.propagators.base", "Gaussian"),
    ("propulate.propagators.base", "InitUniform"),
    ("propulate.propagators.ga", "IntervalMutationNormal"),
    ("propulate.propagators.nm", "ParallelNelderMead"),
    ("propulate.propagators.cmaes", "CMAPropagator"),
    ("propulate.propagators.pso", "InitUniformPSO"),
    ("propulate.propagators.pso", "BasicPSO"),
    ("propulate.propagators.pso", "VelocityClampingPSO"),
    ("propulate.propagators.pso", "ConstrictionPSO"),
    ("propulate.propagators.pso", "CanonicalPSO"),
    ("propulate.propagators.pso", "StatelessPSO"),
    ("propulate.utils", "get_default_propagator"),
    ("propulate.utils", "set_logger_config"),
    ("propulate.utils.benchmark_functions", "get_function_search_space"),
    ("propulate.utils.benchmark_functions", "parse_arguments"),
    ("propulate.utils.benchmark_functions", "sphere"),
    ("propulate.utils.benchmark_functions", "bukin_n6"),
    ("propulate.utils.benchmark_functions", "egg_crate"),
]

LIMITS = {
    "float1": (0.0, 1.0),
    "float2": (-1.0, 1.0),
    "int1": (0, 5),
    "int2": (1, 8),
    "cat1": ("a", "b", "c", "d", "e"),
    "cat2": ("f", "g", "h"),
}
VALUES = {"float1": 0.1, "float2": 0.2, "int1": 3, "int2": 4, "cat1": "e", "cat2": "f"}


def test_the_package_exports_every_top_level_name_of_1_2_2() -> None:
    import propulate

    for name in TOP_LEVEL:
        assert name in propulate.__all__, name
        assert getattr(propulate, name) is not None
    assert propulate.propagators is importlib.import_module("propulate.propagators")
    assert (
        propulate.get_default_propagator is importlib.import_module("propulate.utils").get_default_propagator
    )


@pytest.mark.parametrize(("module", "name"), MODULE_PATHS, ids=[".".join(pair) for pair in MODULE_PATHS])
def test_every_module_path_of_1_2_2_imports(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is not None


def test_import_propulate_reaches_utils_without_initializing_mpi_first() -> None:
    # A fresh interpreter: this one may have imported MPI already.
    program = (
        "import sys, propulate\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'import propulate initialized MPI'\n"
        "assert callable(propulate.utils.set_logger_config)\n"
        "assert propulate.utils.benchmark_functions.sphere({'x': 2.0}) == 4.0\n"
        "from propulate import Propulator, set_logger_config, surrogate\n"
        "assert surrogate.StaticSurrogate\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_an_unknown_name_still_raises_attribute_error() -> None:
    import propulate

    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        propulate.Nothing  # noqa: B018


def _parameters(cls: type) -> list[str]:
    return [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ][1:]


def test_migrator_and_pollinator_take_1_2_2_positional_arguments_in_its_order() -> None:
    from propulate import Migrator, Pollinator, Propulator

    common = (
        "loss_fn propagator rng island_idx island_comm propulate_comm worker_sub_comm generations".split()
    )
    common += "checkpoint_path migration_topology migration_prob emigration_propagator".split()
    rest = ["island_displs", "island_counts", "surrogate_factory"]
    assert _parameters(Migrator) == [*common, *rest]
    assert _parameters(Pollinator) == [*common, "immigration_propagator", *rest]
    assert _parameters(Propulator) == [*common, *rest]
    assert inspect.signature(Pollinator.__init__).parameters["generations"].default == 0
    assert issubclass(Migrator, Propulator) and issubclass(Pollinator, Propulator)


def test_individual_embeds_categoricals_one_hot_in_the_order_of_the_limits() -> None:
    ind = Individual(VALUES, LIMITS)
    assert len(ind) == 6 and ind.position.shape == (12,)
    ind["cat1"] = "b"
    assert ind["cat1"] == "b" and ind.position[5] == 1.0 and ind.position[4:9].sum() == 1.0
    assert list(ind.keys()) == list(VALUES)


def test_underscore_entries_are_data_as_in_1_2_2() -> None:
    ind = Individual({**VALUES, "_s": [1, 0.2, 3]}, LIMITS)  # 1.2.2 also takes them in the position dict
    assert ind["_s"] == [1, 0.2, 3]
    ind["_s"] = 5.0
    assert "_s" in ind and "_s" in ind.keys() and "_s" in ind.mapping and "_s" in ind.mapping.keys()
    assert ind.mapping == {**VALUES, "_s": 5.0}
    assert len(ind) == 6 and list(ind) == list(VALUES) and ind.params() == VALUES
    other = Individual(VALUES, LIMITS)
    assert ind.equals(other), "an entry is not a parameter"
    del ind["_s"]
    assert "_s" not in ind and "_s" not in ind.keys() and "_s" not in ind.mapping
    with pytest.raises(KeyError, match="_s"):
        ind["_s"]


def test_underscore_entries_travel_with_copies_but_not_to_children() -> None:
    ind = Individual(VALUES, LIMITS)
    ind["_note"] = {"epochs": [1, 2]}
    ind["_array"] = np.arange(3)
    for carried in (pickle.loads(pickle.dumps(ind)), copy.deepcopy(ind), ind.copy()):
        assert carried["_note"] == {"epochs": [1, 2]} and list(carried["_array"]) == [0, 1, 2]
        carried["_note"]["epochs"].append(3)
    assert ind["_note"] == {"epochs": [1, 2]}, "a copy shares its entries with the original"
    assert "_note" not in ind.child() and ind.child().extras == {}


@pytest.mark.parametrize(
    ("entries", "stored_as"),
    [
        ({"_s": [1, 0.2, 3], "_name": "x"}, "data"),
        ({"_pair": (1, 2)}, "data_pickle"),
        ({"_nan": float("nan")}, "data_pickle"),
        ({"_array": np.arange(3)}, "data_pickle"),
    ],
)
def test_checkpoint_rows_keep_entries_exactly(entries: dict, stored_as: str) -> None:
    fields = encode_extras(entries)
    assert list(fields) == [stored_as]
    back = decode_extras(pickle.loads(pickle.dumps(fields)))
    assert back is not None and back.keys() == entries.keys()
    for key, value in entries.items():
        assert type(back[key]) is type(value)
        assert repr(back[key]) == repr(value)


def test_exported_frame_has_one_column_per_entry() -> None:
    pytest.importorskip("pandas")
    from propulate.report import to_dataframe

    inds = []
    for i in range(3):
        ind = Individual({**VALUES, "float1": i / 10}, LIMITS, generation=i, rank=0)
        ind.loss, ind.evaltime, ind.evalperiod, ind.uid, ind.island = float(i), 100.0 + i, 1.0, i, 0
        ind.status = ind.status.COMPLETED
        if i != 1:
            ind["_tag"] = [i, "x"]
        inds.append(ind)
    frame = to_dataframe(inds)
    assert list(frame["user_attrs__tag"]) == [[0, "x"], None, [2, "x"]]


@pytest.mark.parametrize("rng", [np.random.default_rng(3), random.Random(3)], ids=["numpy", "random"])
def test_gaussian_propagator_of_1_2_2_keeps_its_children_in_bounds(rng: object) -> None:
    gaussian = Gaussian(LIMITS, 0.7, rng)  # positional, as in 1.2.2
    parent = Individual(VALUES, LIMITS)
    children = [gaussian([parent])[0] for _ in range(200)]
    positions = np.array([child.position for child in children])
    assert (gaussian.parents, gaussian.offspring) == (1, 1)
    assert np.ptp(positions, axis=0).min() > 0, "every slot moves"
    for child in children:
        assert child is not parent and 0.0 <= child["float1"] <= 1.0 and 1 <= child["int2"] <= 8
        assert child["cat1"] in LIMITS["cat1"]
    assert parent.params() == VALUES


def test_gaussian_propagator_refuses_a_scale_that_is_not_positive() -> None:
    for scale in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="scale"):
            Gaussian(LIMITS, scale)


def test_dynamic_surrogate_names_its_optional_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    from propulate.surrogate import DynamicSurrogate

    monkeypatch.setitem(sys.modules, "sklearn", None)  # as if scikit-learn were not installed
    with pytest.raises(ImportError, match=r'scikit-learn.*pip install "propulate\[surrogate\]"'):
        DynamicSurrogate({"x": (0.0, 1.0)})


def test_more_islands_than_workers_give_one_island_per_worker() -> None:
    from propulate.errors import LayoutError
    from propulate.mpi.layout import island_sizes_for

    # 1.2.2 left the extra islands empty: a tutorial's default of 2 islands ran on one rank.
    assert island_sizes_for(1, 2, None).tolist() == [1]
    assert island_sizes_for(3, 5, None).tolist() == [1, 1, 1]
    assert island_sizes_for(5, 2, None).tolist() == [3, 2]
    with pytest.raises(LayoutError, match="island_sizes"):
        island_sizes_for(2, 2, [2, 0])


def test_entries_read_back_are_not_shared_between_individuals() -> None:
    fields = encode_extras({"_epochs": [1, 2]})  # readers parse equal rows once
    first, second = decode_extras(fields), decode_extras(fields)
    assert first is not None and second is not None
    first["_epochs"].append(3)
    assert second["_epochs"] == [1, 2]


def test_assigning_entries_replaces_them_and_checks_their_keys() -> None:
    ind = Individual(VALUES, LIMITS)
    ind["_old"] = 1
    ind.extras = {"_new": 2}
    assert dict(ind.extras) == {"_new": 2} and "_old" not in ind
    with pytest.raises(KeyError, match="must start with '_'"):
        ind.extras = {"float1": 0.5}
    ind.extras = None
    assert ind.extras == {} and ind.mapping == VALUES
