"""Bytes of one output pipe → lines of ``(rank, text)``. Pure: no I/O, no clock of its own.

The caller reads chunks (not ``readline``) and feeds them here, so that a progress bar that
only ever writes ``\\r`` shows its latest state at most every ``PARTIAL_SECONDS`` instead of
nothing until the bar finishes, and a line without end cannot grow the buffer past
``MAX_LINE_BYTES``. Torchrun's ``[rankN]:`` prefix becomes the line's rank.
"""
from __future__ import annotations

from workers.runner import launch

MAX_LINE = 16_384  # characters; longer lines are cut with a marker
MAX_LINE_BYTES = MAX_LINE * 4
PARTIAL_SECONDS = 1.0  # how often an unfinished progress-bar line shows its latest state

Line = tuple[int, str]


def finish(raw: bytes, dropped: int = 0, rank: int = 0) -> Line:
    """One complete line: its rank (torchrun's ``[rankN]:`` prefix) and its text.

    A progress bar that rewrote the line with ``\\r`` keeps only its latest state; a line
    longer than ``MAX_LINE`` characters is cut with a marker saying how much was dropped.
    A line without the prefix (torchrun's own, or a one-process job's) keeps ``rank``.
    """
    return finish_text(raw.decode("utf-8", "replace"), dropped, rank)


def finish_text(text: str, dropped: int = 0, rank: int = 0) -> Line:
    match = launch.RANK_LINE.match(text)
    if match:
        rank, text = int(match.group(1)), text[match.end():]
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
        match = launch.RANK_LINE.match(text)
        if match:
            rank, text = int(match.group(1)), text[match.end():]
    if len(text) > MAX_LINE or dropped:
        cut = len(text[MAX_LINE:].encode("utf-8", "replace")) + dropped
        text = f"{text[:MAX_LINE]} … [line truncated: {cut} more bytes]"
    return rank, text


class LineSplitter:
    """The state of one pipe between chunks: ``feed`` chunks, ask for ``partial`` lines now
    and then (with the current monotonic time), and ``close`` at the end of the stream.
    ``rank``: the rank of a line without torchrun's prefix — a node's first rank (a rank-0 line
    of a node whose first rank is not 0 keeps its 0: the prefix and its absence differ)."""

    def __init__(self, rank: int = 0):
        self.rank = rank
        self.buf = b""
        self.dropped = 0  # bytes of an over-long line thrown away so far
        self.shown: Line | None = None  # the partial state last emitted for the current line
        self.shown_at = 0.0
        self.since: float | None = None  # when the current unfinished line was first seen

    def feed(self, chunk: bytes) -> list[Line]:
        out: list[Line] = []
        if self.dropped:  # inside an over-long line: skip to its end
            end = chunk.find(b"\n")
            if end < 0:
                self.dropped += len(chunk)
                return out
            self.dropped += end
            out.append(finish(self.buf, self.dropped, self.rank))
            self.buf, self.dropped, self.shown, chunk = b"", 0, None, chunk[end + 1:]
        data = self.buf + chunk
        end = data.rfind(b"\n")
        if end >= 0:
            self.since = None
            self.buf = data[end + 1:]
            out.extend(self._complete(data[:end]))
        else:
            self.buf = data
        self._bound()
        return out

    def _complete(self, head: bytes) -> list[Line]:
        """The lines of ``head`` (everything up to the last newline of the data so far)."""
        out: list[Line] = []
        texts = head.decode("utf-8", "replace").split("\n")
        if self.shown is not None:
            line = finish_text(texts.pop(0), rank=self.rank)
            if line != self.shown:  # else this final state was already shown as a partial line
                out.append(line)
            self.shown = None
        plain = all(len(t) <= MAX_LINE for t in texts) if len(head) > MAX_LINE else True
        if plain and b"\r" not in head and b"[rank" not in head:
            out.extend([(self.rank, t) for t in texts])  # the common case, at a fraction of the cost
        else:
            out.extend([finish_text(t, rank=self.rank) for t in texts])
        return out

    def _bound(self) -> None:
        """Keep an unfinished line within ``MAX_LINE_BYTES``."""
        if len(self.buf) <= MAX_LINE_BYTES:
            return
        cr = self.buf.rfind(b"\r")
        if cr > 0:
            self.buf = self.buf[cr:]  # a progress bar: only its latest state matters
        if len(self.buf) > MAX_LINE_BYTES:
            self.dropped = len(self.buf) - MAX_LINE_BYTES
            self.buf = self.buf[:MAX_LINE_BYTES]

    def partial(self, now: float) -> list[Line]:
        """The latest state of an unfinished ``\\r`` line, if it changed and is due."""
        if b"\r" not in self.buf or self.dropped:
            return []
        if self.since is None:
            self.since = now  # a bar that finishes within PARTIAL_SECONDS stays one line
        if now - max(self.since, self.shown_at) < PARTIAL_SECONDS:
            return []
        line = finish(self.buf, rank=self.rank)
        if not line[1] or line == self.shown:
            return []
        self.shown, self.shown_at = line, now
        cr = self.buf.rfind(b"\r")
        self.buf = self.buf[:self.buf.find(b"\r")] + self.buf[cr:] if cr > 0 else self.buf
        return [line]

    def close(self) -> list[Line]:
        """What is left at the end of the stream: a last line without newline, if any."""
        if not self.buf and not self.dropped:
            return []
        line = finish(self.buf, self.dropped, self.rank)
        return [] if line == self.shown else [line]
