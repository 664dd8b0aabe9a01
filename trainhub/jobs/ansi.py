"""Log lines as HTML: ANSI SGR colours become spans, everything else is escaped.

One renderer for every place a line is shown (page, older pages, search, SSE), so a line
like ``<script>`` is text everywhere.
"""
from __future__ import annotations

import re
from html import escape

# Any CSI sequence; only SGR (ending in "m") changes the style, the rest (cursor moves,
# erase-line from progress bars) is dropped. Bare ESC and other C0 controls are dropped too.
CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
COLOURS = {30: "black", 31: "red", 32: "green", 33: "yellow", 34: "blue", 35: "magenta", 36: "cyan", 37: "white"}


def _apply(codes: str, style: dict) -> None:
    parts = [int(p) if p.isdigit() else 0 for p in codes.split(";")] if codes else [0]
    i = 0
    while i < len(parts):
        code = parts[i]
        if code == 0:
            style.clear()
        elif code == 1:
            style["b"] = "ansi-bold"
        elif code == 3:
            style["i"] = "ansi-italic"
        elif code == 4:
            style["u"] = "ansi-underline"
        elif code in (22, 23, 24):
            style.pop({22: "b", 23: "i", 24: "u"}[code], None)
        elif code in COLOURS:
            style["fg"] = f"ansi-{COLOURS[code]}"
        elif 90 <= code <= 97:
            style["fg"] = f"ansi-bright-{COLOURS[code - 60]}"
        elif code == 39:
            style.pop("fg", None)
        elif 40 <= code <= 47:
            style["bg"] = f"ansi-bg-{COLOURS[code - 10]}"
        elif code == 49:
            style.pop("bg", None)
        elif code in (38, 48) and i + 1 < len(parts):
            i += 2 if parts[i + 1] == 5 else 4 if parts[i + 1] == 2 else 0  # 256/truecolour: skipped
        i += 1


def to_html(text: str) -> str:
    """Escaped HTML for one line, with SGR colours as ``<span class="ansi-…">``."""
    if "\x1b" not in text:
        return escape(CONTROL.sub("", text), quote=False)
    out: list[str] = []
    style: dict[str, str] = {}
    pos = 0
    for match in CSI.finditer(text):
        _emit(out, text[pos:match.start()], style)
        if match.group(2) == "m":
            _apply(match.group(1), style)
        pos = match.end()
    _emit(out, text[pos:], style)
    return "".join(out)


def _emit(out: list[str], chunk: str, style: dict) -> None:
    chunk = escape(CONTROL.sub("", chunk.replace("\x1b", "")), quote=False)
    if not chunk:
        return
    out.append(f'<span class="{" ".join(style.values())}">{chunk}</span>' if style else chunk)


def plain(text: str) -> str:
    return CONTROL.sub("", CSI.sub("", text))


def highlight(text: str, query: str) -> str:
    """Escaped plain text with every case-insensitive match of ``query`` in ``<mark>``."""
    text = plain(text)
    if not query:
        return escape(text, quote=False)
    out, pos = [], 0
    for match in re.finditer(re.escape(query), text, re.IGNORECASE):
        out.append(escape(text[pos:match.start()], quote=False))
        out.append(f"<mark>{escape(match.group(0), quote=False)}</mark>")
        pos = match.end()
    out.append(escape(text[pos:], quote=False))
    return "".join(out)


def row(line, *, href: str = "", body: str | None = None) -> str:
    """One log row; ``href`` is the permalink base (the job page URL)."""
    seq, rank, stream = line[0], line[1], line[2]
    body = to_html(line[3]) if body is None else body
    outcome = _outcome_class(stream, line[3])
    return (f'<div class="line {escape(stream)}{outcome}" id="L{seq}" data-seq="{seq}" data-rank="{rank}">'
            f'<a class="n" href="{href}?line={seq}#L{seq}">{seq}</a><span class="r">{rank}</span>'
            f'<span class="t">{body}</span></div>')


def _outcome_class(stream: str, text: str) -> str:
    """The executor's closing "finished: …" line coloured by the outcome, not as every system line."""
    if stream != "s" or not text.startswith("finished: "):
        return ""
    return " ok" if text == "finished: exited with code 0" else " bad"
