"""The line splitter, fed bytes directly: what a job prints becomes the lines a user reads."""
from __future__ import annotations

import pytest

from workers.lines import MAX_LINE, MAX_LINE_BYTES, PARTIAL_SECONDS, LineSplitter

pytestmark = pytest.mark.no_db


def split(*chunks: bytes) -> list[tuple[int, str]]:
    splitter = LineSplitter()
    out = [line for chunk in chunks for line in splitter.feed(chunk)]
    return out + splitter.close()


def test_lines_split_across_chunks_come_out_whole():
    assert split(b"hel", b"lo\nwor", b"ld\n") == [(0, "hello"), (0, "world")]


def test_windows_line_endings_leave_no_carriage_return_in_the_text():
    assert split(b"one\r\ntwo\r\n") == [(0, "one"), (0, "two")]


def test_a_rank_prefix_becomes_the_lines_rank():
    assert split(b"[rank3]: hello\nplain\n") == [(3, "hello"), (0, "plain")]


def test_on_a_node_whose_first_rank_is_2_an_unprefixed_line_is_rank_2_and_a_rank0_line_stays_rank_0():
    # a multi-node job: torchrun's own lines have no prefix and belong to the node's first rank, but
    # c10d's rendezvous may give this node global rank 0, whose lines must not be relabelled
    splitter = LineSplitter(rank=2)
    lines = splitter.feed(b"[rank0]: epoch 1 loss 0.5\nnode warning\n[rank1]: x\r[rank1]: y\n") + splitter.close()
    assert lines == [(0, "epoch 1 loss 0.5"), (2, "node warning"), (1, "y")]


def test_a_progress_bar_rewritten_with_carriage_returns_keeps_only_its_final_state():
    assert split(b"10%\r20%", b"\r30%\n", b"done\n") == [(0, "30%"), (0, "done")]


def test_an_unfinished_progress_bar_shows_its_latest_state_only_after_the_delay():
    splitter = LineSplitter()
    assert splitter.feed(b"\r[rank1]: step 1/3") == []
    assert splitter.partial(100.0) == []  # just seen: a quick bar stays one line
    assert splitter.partial(100.0 + PARTIAL_SECONDS / 2) == []
    assert splitter.partial(100.0 + PARTIAL_SECONDS) == [(1, "step 1/3")]
    assert splitter.partial(100.0 + PARTIAL_SECONDS * 3) == []  # unchanged: not shown twice
    splitter.feed(b"\r[rank1]: step 2/3")
    assert splitter.partial(100.0 + PARTIAL_SECONDS * 3) == [(1, "step 2/3")]
    assert splitter.feed(b"\r[rank1]: step 2/3\n") == []  # its final state was already shown
    assert splitter.feed(b"next\n") == [(0, "next")]


def test_a_partial_line_that_then_changes_ends_with_its_final_state():
    splitter = LineSplitter()
    splitter.feed(b"\r50%")
    splitter.partial(0.0)
    assert splitter.partial(PARTIAL_SECONDS) == [(0, "50%")]
    assert splitter.feed(b"\r100%\n") == [(0, "100%")]


def test_a_line_without_carriage_return_is_never_shown_partially():
    splitter = LineSplitter()
    splitter.feed(b"still typing")
    assert splitter.partial(0.0) == [] and splitter.partial(60.0) == []
    assert splitter.close() == [(0, "still typing")]


def test_an_over_long_line_is_cut_with_a_marker_and_the_next_line_survives():
    long = b"x" * (MAX_LINE_BYTES * 3)
    lines = split(long[:MAX_LINE_BYTES], long[MAX_LINE_BYTES:], b"\nnext\n")
    assert len(lines) == 2
    assert lines[0][1].startswith("x" * MAX_LINE) and "line truncated" in lines[0][1]
    assert str(len(long) - MAX_LINE) in lines[0][1]
    assert lines[1] == (0, "next")


def test_an_over_long_line_in_one_chunk_is_cut_too():
    lines = split(b"y" * (MAX_LINE + 10) + b"\n")
    assert lines == [(0, "y" * MAX_LINE + " … [line truncated: 10 more bytes]")]


def test_a_progress_bar_that_never_ends_keeps_only_its_latest_state_in_memory():
    splitter = LineSplitter()
    for i in range(20_000):
        splitter.feed(f"\r{i:08d} of 20000".encode())
    assert len(splitter.buf) <= MAX_LINE_BYTES
    assert splitter.close() == [(0, "00019999 of 20000")]


def test_invalid_utf8_is_replaced_not_fatal():
    lines = split(b"bad \xff\xfe bytes\nok\n")
    assert lines[0][1].startswith("bad ") and "\ufffd" in lines[0][1]
    assert lines[1] == (0, "ok")


def test_close_returns_a_last_line_without_newline_and_nothing_when_empty():
    assert split(b"no newline") == [(0, "no newline")]
    assert split(b"ended\n") == [(0, "ended")]
    assert LineSplitter().close() == []
