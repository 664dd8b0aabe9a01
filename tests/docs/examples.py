"""The fenced examples of README.md and docs/*.md, and the marker convention that says how each runs.

A marker is an HTML comment on the line right before a fence (invisible on GitHub); several kinds
may be given, separated by commas: ``<!-- example: run, file job.yaml -->``.

=========================  =====================================================================
fence / marker             what tests/docs/test_doc_examples.py does with it
=========================  =====================================================================
```sh, ```bash            runs it with ``bash -e -o pipefail`` in a directory that mirrors the
                           checkout (``.venv``, ``manage.py``, ...), with the venv NOT on PATH, as
                           in a new terminal: ``.venv/bin/...`` must be written out. The address
                           ``http://127.0.0.1:8000`` is the test's server, ``$TOKEN`` the admin's
                           API token (a block may set its own), and curl fails on an HTTP error.
```yaml, ```json          a job spec: ``POST /api/jobs`` must answer 201.
``run``                    the spec must also succeed on the test's worker (keep these cheap).
``file NAME``              also saved as NAME in that directory for the shell examples (job.yaml).
``fragment``               a section of a spec (``notify:``): submitted inside a minimal spec.
``needs WHAT``             needs GPUs, a cluster or data a test machine lacks: only checked
                           against the runner's spec model (``parse_spec``), not submitted.
``shape NAME``             a JSON document the server sends: each of its keys must be in the
                           real one (NAME: ``api-error``, ``metrics.json``, ``webhook``).
``skip REASON``            not run (production settings, another host, ``make run`` itself).
=========================  =====================================================================

Fences in any other language (``text``, ``python``, none) are not examples. Every shell fence, run
or not, must call ``python``, ``torchrun`` and ``trainhub`` through ``.venv/bin/`` (or ``$PYTHON``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"sh": "shell", "bash": "shell", "yaml": "spec", "json": "spec"}
KINDS = {"run", "file", "fragment", "needs", "shape", "skip"}
SHAPES = {"api-error", "metrics.json", "webhook"}

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
# a program at the start of a command (line start, after ; && || | $( or `), without a path
_BARE = re.compile(r"(?:^|[;&|(`]\s*|\$\(\s*)(?:[A-Z_]+=\S*\s+)*(python3?|torchrun|trainhub|deepspeed|pip)\b")


@dataclass
class Example:
    path: Path
    line: int          # of the opening fence, 1-based
    language: str      # sh, bash, yaml, json
    text: str
    markers: dict[str, str] = field(default_factory=dict)   # kind -> argument ("" when none)

    @property
    def kind(self) -> str:
        return LANGUAGES[self.language]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def collect(paths=DOCS) -> list[Example]:
    """Every sh/bash/yaml/json fence in document order, with the markers on the line before it."""
    found = []
    for path in paths:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            opening = _FENCE.match(lines[i])
            if not opening:
                i += 1
                continue
            indent, language = opening.groups()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
            if language in LANGUAGES:
                body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:end])
                marker = _MARKER.match(lines[i - 1]) if i else None
                found.append(Example(path, i + 1, language, body + "\n", parse_markers(marker.group(1) if marker else "")))
            i = end + 1
    return found


def parse_markers(text: str) -> dict[str, str]:
    """``run, file job.yaml`` -> {"run": "", "file": "job.yaml"}; a comma inside a reason stays in it."""
    parts: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if parts and part.split(" ", 1)[0] not in KINDS:
            parts[-1] += ", " + part
        elif part:
            parts.append(part)
    markers = {}
    for part in parts:
        kind, _, arg = part.partition(" ")
        markers[kind] = arg.strip()
    return markers


def problems(example: Example) -> list[str]:
    """What is wrong with an example's markers, or with a shell example's commands, before running it."""
    out = [f"unknown marker {k!r} (one of {', '.join(sorted(KINDS))})" for k in example.markers if k not in KINDS]
    for kind in ("skip", "needs", "file", "shape"):
        if kind in example.markers and not example.markers[kind]:
            out.append(f"marker {kind!r} needs an argument (a reason, a file name or a shape)")
    if example.markers.get("shape") and example.markers["shape"] not in SHAPES:
        out.append(f"unknown shape {example.markers['shape']!r} (one of {', '.join(sorted(SHAPES))})")
    if example.kind == "shell":
        for number, line in enumerate(example.text.splitlines(), example.line + 1):
            code = line.split(" #", 1)[0]
            if (bare := _BARE.search(code)) and not code.lstrip().startswith("#"):
                out.append(f"line {number}: bare {bare.group(1)!r} fails outside the venv; write .venv/bin/{bare.group(1)}")
    return out
