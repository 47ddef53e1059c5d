"""The code, the help texts and the documents say what is, not how it came to be: no issue numbers.

A reference like "(#12)" or "before issue #12" means something only to whoever has the tracker open,
and it stays in the text long after the issue stopped explaining anything. The scan covers every text
file of the package (help texts are in its sources), the reference DAGs, docs/ and the README.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

# "issue 12", "issues #12, #13", "(#12)", "#12 §3", "since #12"; not a CSS colour ("#555;", "'#ddd'"),
# a Markdown anchor ("(#the-stream)") or a format name ("PKCS#8").
REFERENCE = re.compile(r"\bissues?\s+#?\d+|(?<![\w&\"'#])#\d{1,5}(?![\w;\"'])", re.IGNORECASE)
TEXT = {".py", ".md", ".java", ".go", ".html", ".js", ".css", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg"}


def _texts() -> list[Path]:
    roots = [REPO / "airflow_provider_primus", REPO / "dags", REPO / "docs"]
    found = [p for root in roots for p in root.rglob("*") if p.is_file() and p.suffix in TEXT]
    return [*sorted(found), REPO / "README.md"]


def references(text: str) -> list[str]:
    return [m.group(0) for m in REFERENCE.finditer(text)]


def test_no_issue_numbers_in_the_sources_and_documents() -> None:
    found = {
        f"{path.relative_to(REPO)}:{n}": hits
        for path in _texts()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if (hits := references(line))
    }
    assert found == {}


def test_the_scan_tells_references_from_colours_and_anchors() -> None:
    """The check itself can fail, and does not cry wolf on what only looks like a reference."""
    assert references("several sources are open (#23 §3)") == ["#23"]
    assert references("the world before issue #20, row for row") == ["issue #20"]
    assert references("as in issue 7") == ["issue 7"]
    assert references("TLS on in the pods (the default since #22).") == ["#22"]
    assert references('color: str = "#555"') == []
    assert references("--muted: #666; --line: #ddd;") == []
    assert references("[below](#why-the-items-have-a-lifecycle), a PKCS#8 key") == []
