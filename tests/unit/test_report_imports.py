"""How the modules of ``propulate/report/`` import each other and what importing them loads (issue 39).

The package is layered as its docstring says: each module imports only from the layers below it, so there is
no import circle; no module of ``propulate/`` imports another's private (underscore) name; and importing the
package loads neither MPI nor any optional dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "propulate"
REPORT = PACKAGE / "report"

#: The modules of ``propulate/report/``, lowest layer first; a module imports only from lower layers.
LAYERS = [{"frame"}, {"fronts"}, {"summary", "lineage"}, {"text", "prepare"}, {"plots", "html"}]


def _imports_within_report(path: Path) -> set[str]:
    """Return the modules of ``propulate/report/`` that the module at ``path`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:  # from . import frame
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("propulate.report."):
            found.add(node.module.split(".")[2])
    return found


def test_every_module_of_the_package_has_a_layer():
    modules = {path.stem for path in REPORT.glob("*.py")} - {"__init__"}
    assert modules == set().union(*LAYERS)


@pytest.mark.parametrize("module", sorted(set().union(*LAYERS)))
def test_a_module_imports_only_from_the_layers_below_it(module):
    level = next(i for i, layer in enumerate(LAYERS) if module in layer)
    below = set().union(*LAYERS[:level])
    imported = _imports_within_report(REPORT / f"{module}.py")
    assert imported <= below, f"report/{module}.py imports {sorted(imported - below)} from its layer or above"


def _private_imports(path: Path) -> list[str]:
    """Return ``module.name`` for each private name the module at ``path`` takes from another of propulate."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: set[str] = set()  # names under which it holds modules of propulate
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.level == 0 and not (node.module or "").startswith("propulate"):
                continue
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                modules.add(alias.asname or alias.name)
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{source}.{alias.name}")
        elif isinstance(node, ast.Import):
            modules.update(
                alias.asname or alias.name for alias in node.names if alias.name.startswith("propulate")
            )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_module_takes_a_private_name_of_another():
    taken = {
        str(path.relative_to(REPO)): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if (names := _private_imports(path))
    }
    assert not taken, taken


def test_importing_the_package_loads_no_mpi_and_no_optional_package():
    # A fresh interpreter: this one has loaded pandas and maybe MPI already.
    code = (
        "import sys, propulate, propulate.report\n"
        "from propulate.report import frame, fronts, html, plots, prepare, summary, text\n"
        "loaded = [m for m in ('mpi4py.MPI', 'pandas', 'matplotlib', 'plotly') if m in sys.modules]\n"
        "assert not loaded, f'importing propulate.report loaded {loaded}'\n"
        "assert propulate.report.load_dataframe is frame.load_dataframe\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
