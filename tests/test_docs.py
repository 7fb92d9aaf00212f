"""The documentation in ``docs/`` builds with warnings as errors, and its API page lists every public name.

The build is the suite's one build of the docs (the ``docs_html`` fixture of ``tests/conftest.py``: Sphinx
in a subprocess, as CI runs it, so autodoc imports this checkout of propulate); the fixture fails the test
on any warning. "Lists" means the API page documents the object: Sphinx gives every documented class,
function and value an HTML anchor named by its full name, under the module that defines it
(``propulate.propagators.ga.PointMutation``), except the package's own names (``propulate.Islands``), the
surrogates (``propulate.surrogate.StaticSurrogate``) and the trackers (``propulate.trackers.MLflowTracker``).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path


def _defining_module_names(module_name: str) -> dict[str, str]:
    """Map each name of a module's ``__all__`` to its anchor: ``<defining module>.<name>``.

    A class or function is documented under the module that defines it; a value (``FORMAT_VERSION``) under
    the module whose ``__all__`` names it.
    """
    module = importlib.import_module(module_name)
    anchors = {}
    for name in module.__all__:
        obj = getattr(module, name)
        defined = inspect.isclass(obj) or inspect.isroutine(obj)
        anchors[name] = f"{obj.__module__ if defined else module_name}.{name}"
    return anchors


def _expected_anchors() -> dict[str, str]:
    """Return ``{public name: anchor}`` for every name the API page must document."""
    import propulate

    expected = {}
    for name in propulate.__all__:
        obj = getattr(propulate, name)
        # A module among the package's names (``propagators``, as in 1.2.2) has its own section.
        expected[f"propulate.{name}"] = (
            f"module-{obj.__name__}" if inspect.ismodule(obj) else f"propulate.{name}"
        )
    for module_name in (
        "propulate.errors",
        "propulate.checkpoint",
        "propulate.propagators",
        "propulate.utils",
        "propulate.utils.benchmark_functions",
        "propulate.utils.distributed",
    ):
        for name, anchor in _defining_module_names(module_name).items():
            expected[f"{module_name}.{name}"] = anchor
    try:
        surrogate = importlib.import_module("propulate.surrogate")
    except ImportError:  # the package is optional for this check until it exists
        surrogate = None
    if surrogate is not None:
        # The surrogates are documented under the package users import them from.
        for name in surrogate.__all__:
            expected[f"propulate.surrogate.{name}"] = f"propulate.surrogate.{name}"
    # So are the trackers.
    for name in importlib.import_module("propulate.trackers").__all__:
        expected[f"propulate.trackers.{name}"] = f"propulate.trackers.{name}"
    return expected


def test_docs_build_without_warnings_and_list_every_public_name(docs_html: Path) -> None:
    api = (docs_html / "api.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'\bid="([^"]+)"', api))
    missing = sorted(name for name, anchor in _expected_anchors().items() if anchor not in anchors)
    assert not missing, f"the API page does not document: {', '.join(missing)}"
