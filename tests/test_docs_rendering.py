"""The built documentation reads well in a real browser without network: code fits, formulas render.

The docs are built once for the suite (``tests/conftest.py``, as CI does) and opened from disk in
headless Chromium, driven by Playwright, at 1280 px width with the network switched off, as on an offline
login node (``tests/browser.py``). Without a browser or Playwright the tests are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .browser import launch, open_offline

#: A script or style sheet loaded from the network: ``<script src="http...">``, ``<link href="//...">``.
REMOTE_ASSET = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]*\"[^>]*>")


@pytest.fixture(scope="module")
def html(docs_html: Path) -> Path:
    """The HTML folder of the suite's one build of the docs (``tests/conftest.py``)."""
    return docs_html


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Yield headless Chromium, launched once for this module."""
    with launch() as chromium:
        yield chromium


def test_no_page_loads_scripts_or_styles_from_the_network(html: Path) -> None:
    remote = {
        f"{page.relative_to(html)}: {tag}"
        for page in html.rglob("*.html")
        for tag in REMOTE_ASSET.findall(page.read_text(encoding="utf-8"))
    }
    assert not remote, "pages reference remote scripts or styles:\n" + "\n".join(sorted(remote))


@pytest.mark.parametrize("page_name", ["getting_started.html", "index.html"])
def test_quickstart_code_fits_without_sideways_scroll(html: Path, browser: Any, page_name: str) -> None:
    page, escaped = open_offline(browser, html / page_name)
    widths = page.evaluate(
        """() => [...document.querySelectorAll("div.highlight pre")].map(pre => ({
            first: pre.textContent.split("\\n")[0],
            scroll: pre.scrollWidth,
            client: pre.clientWidth,
        }))"""
    )
    page.context.close()
    assert any("import" in block["first"] for block in widths), f"no Python code block on {page_name}"
    scrolling = [block for block in widths if block["scroll"] > block["client"]]
    assert not scrolling, f"code blocks on {page_name} scroll sideways at 1280 px: {scrolling}"
    assert not escaped, f"{page_name} tried the network: {escaped}"


def test_formulas_on_the_scaling_page_render_offline(html: Path, browser: Any) -> None:
    page, escaped = open_offline(browser, html / "scaling.html")
    # MathJax 3 resolves this promise once it has typeset the page; without MathJax it never exists.
    typeset = page.evaluate(
        """async () => {
            for (let i = 0; i < 100 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++) {
                await new Promise(resolve => setTimeout(resolve, 100));
            }
            if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
            await MathJax.startup.promise;
            return true;
        }"""
    )
    formulas = page.evaluate("() => document.querySelectorAll('.math').length")
    rendered = page.evaluate("() => document.querySelectorAll('.math mjx-container').length")
    text = page.evaluate("() => document.body.innerText")
    page.context.close()
    assert typeset, "MathJax did not load on scaling.html without network"
    assert formulas > 0, "scaling.html has no formulas to check"
    assert rendered == formulas, f"{rendered} of {formulas} formulas rendered by MathJax"
    raw = [marker for marker in ("\\(", "\\[", "$$", "\\begin{") if marker in text]
    assert not raw, f"raw LaTeX visible on scaling.html: {raw}"
    assert not escaped, f"scaling.html tried the network: {escaped}"
