"""Every test the docs cite exists: a row of docs/RELIABILITY.md or docs/SECURITY.md (or any other
page) that names ``tests/….py`` or ``tests/….py::test_name`` points at a real file and function.
A renamed or moved test otherwise leaves the doc claiming evidence that no longer runs."""
from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.no_db

REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def missing_references(text: str) -> list[str]:
    missing = []
    for match in REFERENCE.finditer(text):
        path, name = ROOT / match.group(1), match.group(2)
        if not path.is_file():
            missing.append(match.group(0))
        elif name and not re.search(rf"^\s*def {name}\b", path.read_text(encoding="utf-8"), re.M):
            missing.append(match.group(0))
    return missing


def test_the_checker_notices_a_moved_file_and_a_renamed_test():
    assert missing_references("`tests/nowhere/test_gone.py`") == ["tests/nowhere/test_gone.py"]
    assert missing_references("`tests/docs/test_doc_test_references.py::test_renamed_away`") == [
        "tests/docs/test_doc_test_references.py::test_renamed_away"]
    assert missing_references("`tests/docs/test_doc_test_references.py::missing_references`") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_test_a_page_cites_exists(page):
    assert missing_references(page.read_text(encoding="utf-8")) == [], \
        f"{page.relative_to(ROOT)} cites tests that do not exist"
