"""The live copy of a log: a Redis Stream entry holds its lines as the JSON array a ``lines`` event sends,
so the web server passes it on without touching a line (``logs.entry_json``)."""
from __future__ import annotations

import json

from trainhub.jobs import ansi, logs
from trainhub.jobs.logs import Line


def test_an_entry_is_the_lines_event_with_html_only_for_lines_a_browser_cannot_show_as_text():
    lines = [Line(40, 0, "o", "epoch 1 <loss> & \"acc\""), Line(41, 1, "e", "\x1b[33mwarn\x1b[0m"),
             Line(42, 0, "o", "C:\\run\\b and a tab\t"), Line(43, 0, "s", "bell\x07"), Line(44, 0, "o", "Größe ☃")]
    data = logs.entry_json(lines)
    assert json.loads(data) == [[40, 0, "o", "epoch 1 <loss> & \"acc\""],
                                [41, 1, "e", "\x1b[33mwarn\x1b[0m", '<span class="ansi-yellow">warn</span>'],
                                [42, 0, "o", "C:\\run\\b and a tab\t"],  # backslashes are text, not controls
                                [43, 0, "s", "bell\x07", "bell"],
                                [44, 0, "o", "Größe ☃"]]
    assert data.isascii() and "\n" not in data and "\r" not in data  # one SSE data: line
    # the same text, line by line, as a web server writes a line it cuts from an entry or reads from the database
    assert data == f"[{','.join(map(logs.line_json, lines))}]"
    plain = [lines[0], lines[2], lines[4]]
    assert logs.entry_json(plain) == f"[{','.join(map(logs.line_json, plain))}]"


def test_an_entry_published_and_read_back_from_redis_is_its_lines_and_their_event(live_settings):
    lines = [Line(s, s % 2, "o", f"line {s}") for s in range(7, 12)]
    pipe = logs.redis_client().pipeline(transaction=False)
    logs._add_entries(pipe, 3, lines)
    pipe.execute()
    [(_, fields)] = logs.redis_client().xrange(logs.stream_key(3))
    entry = logs.decode_entry(fields)
    assert (entry.first, entry.last, entry.lines()) == (7, 11, lines)
    assert entry.frame == f"event: lines\nid: 11\ndata: {logs.entry_json(lines)}\n\n".encode()


def test_an_entry_a_worker_of_the_version_before_wrote_reads_the_same():
    """``lines`` as ``[[rank, stream, text], ...]`` and no ``last``: what a worker not yet upgraded writes."""
    lines = [Line(5, 0, "o", "plain"), Line(6, 1, "e", "\x1b[31mred\x1b[0m")]
    old = {b"seq": b"5", b"lines": json.dumps([l[1:] for l in lines]).encode()}
    entry = logs.decode_entry(old)
    assert (entry.first, entry.last, entry.lines()) == (5, 6, lines)
    assert json.loads(entry.frame.split(b"data: ", 1)[1]) == [[5, 0, "o", "plain"],
                                                               [6, 1, "e", "\x1b[31mred\x1b[0m", ansi.to_html(lines[1].text)]]
