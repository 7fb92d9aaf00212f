"""Headless Chromium for tests that look at a page as a reader would: offline, at 1280 px.

Chromium comes from the distribution (Debian's ``chromium-headless-shell`` or ``chromium``, which ``.ci/run``
installs) and is driven by Playwright; set ``PROPULATE_CHROMIUM`` to use another binary. Without either,
the tests that need them are skipped.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

VIEWPORT = {"width": 1280, "height": 900}
#: The distribution's binaries, lightest first.
CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")


def chromium() -> str:
    """Return the Chromium binary to use, or skip the test."""
    given = os.environ.get("PROPULATE_CHROMIUM")
    if given:
        return given
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)}; .ci/run installs one)")


@contextmanager
def launch() -> Iterator[Any]:
    """Yield headless Chromium driven by Playwright, or skip the test without either."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = chromium()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        try:
            yield browser
        finally:
            browser.close()


def open_offline(
    browser: Any, page_file: Path, page_errors: list[str] | None = None
) -> tuple[Any, list[str]]:
    """Open ``page_file`` at 1280 px with the network off; return the page and a list that fills with the
    URLs of requests that left the disk or failed.

    The uncaught JavaScript errors of the page, from its first script on, are appended to ``page_errors``
    when given. The page has a context of its own: close it with ``page.context.close()``.
    """
    context = browser.new_context(viewport=VIEWPORT, offline=True)
    page = context.new_page()
    escaped: list[str] = []
    if page_errors is not None:
        page.on("pageerror", lambda error: page_errors.append(str(error)))

    def note(request: Any) -> None:
        if not request.url.startswith("file:"):
            escaped.append(request.url)

    page.on("request", note)
    page.on("requestfailed", lambda request: escaped.append(f"{request.url} (failed)"))
    page.goto(page_file.as_uri(), wait_until="load")
    return page, escaped
