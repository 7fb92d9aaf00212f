"""What the import contracts (lint-imports, pyproject.toml) cannot see: no module imports a private name."""

from __future__ import annotations

import ast
from pathlib import Path

import propulate

PACKAGE = Path(propulate.__file__).parent


def private_imports(path: Path) -> list[str]:
    """Return ``module.name`` for every underscore name ``path`` imports from a module of the package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").startswith("propulate")
        ):
            found += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_")]
    return [name for name in found if not name.endswith(".__version__") and "__future__" not in name]


def test_no_module_imports_a_private_name_of_another() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if (names := private_imports(path))
    }
    assert offenders == {}
