"""README.md says what each extra brings and how big the install is (issue 21, finding 8)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_every_extra_has_a_row_with_what_it_brings_and_its_size() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = re.findall(r"^([a-z]+) = \[", table, flags=re.MULTILINE)
    install = section(readme, "Install")
    rows = [line for line in install.splitlines() if line.startswith("| `pip install")]
    listed = {
        name
        for line in rows
        for m in re.finditer(r"propulate\[([a-z,]+)\]", line)
        for name in m.group(1).split(",")
    }
    # The benchmark-only and test-only extras are for developers: dev brings them.
    assert set(extras) - {"bench", "test"} <= listed, set(extras) - listed
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 3 and cells[1] and re.search(r"\d+(\.\d+)? (MB|GB)", cells[2]), row


def test_the_main_job_says_how_big_its_install_is() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    fresh = section(readme, "Fresh machine: two commands")
    assert "[mpi,torch]" in fresh and re.search(r"about \d+(\.\d+)? GB", fresh) and "CUDA" in fresh
