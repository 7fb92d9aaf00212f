"""Sphinx configuration of propulate's documentation.

Build it from the repository root with warnings as errors, as CI does::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Besides Sphinx's own extensions, numpydoc renders the docstrings, furo is the theme and
``sphinx-mathjax-offline`` copies MathJax into the build, so that formulas render without network access (an
offline login node). Nothing is downloaded, neither by the build nor by the built pages.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The package is imported from this checkout, installed or not.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import propulate  # noqa: E402  (after the path set-up above)

project = "propulate"
author = "the propulate developers"
copyright = "the propulate developers, BSD-3-Clause"
release = propulate.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    # Points MathJax at a copy under _static/mathjax instead of a CDN; the module name has dashes.
    "sphinx-mathjax-offline",
]

exclude_patterns = ["_build"]
source_suffix = {".rst": "restructuredtext"}

# No intersphinx inventories: the build must not reach the network. Cross-references to numpy, mpi4py or the
# standard library stay plain text.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}

# Members appear in the order of the source, which reads top-down; the API pages pass :ignore-module-all:
# because ``__all__`` is kept sorted alphabetically.
autodoc_member_order = "bysource"
# Signatures keep the annotations; the Parameters sections say the rest (shapes, ranges, units).
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# numpydoc renders the docstrings' sections; class members come from autodoc's :members:, not from
# numpydoc's own summary tables, and its validation is left to ruff's pydocstyle checks.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

html_theme = "pydata_sphinx_theme"
html_title = f"propulate {release}"
html_static_path = ["_static"]
html_css_files = ["propulate.css"]
# The pages are few: the top bar lists them, so the left sidebar goes and code gets its width; the right one
# keeps the page's own table of contents.
html_sidebars: dict[str, list[str]] = {"**": []}
html_theme_options = {"navbar_align": "left", "show_toc_level": 2}
