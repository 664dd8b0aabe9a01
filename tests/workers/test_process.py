"""A job's processes: the pump turns every rank's output into lines (progress bars keep their
latest state), the environment keeps the dashboard's secrets out, a stop comes with grace."""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from workers import process
from workers.lines import MAX_LINE
from workers.process import pump as _pump
from workers.runner.config import parse_spec

pytestmark = [pytest.mark.slow, pytest.mark.no_db]


def run(code: str, *, timeout: float = 20) -> list[tuple[int, str, str]]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: queue.Queue = queue.Queue()
    readers = [threading.Thread(target=_pump, args=(pipe, name, out)) for pipe, name in
               ((proc.stdout, "o"), (proc.stderr, "e"))]
    for r in readers:
        r.start()
    proc.wait(timeout)
    for r in readers:
        r.join(timeout)
    lines = []
    while not out.empty():
        stream, items = out.get()
        lines.extend((rank, stream, text) for rank, text in items)
    return lines


def test_each_line_keeps_its_rank_and_stream():
    lines = run("import sys; print('[rank1]: hello'); print('plain'); print('[rank0]: oops', file=sys.stderr)")
    assert sorted(lines) == sorted([(1, "o", "hello"), (0, "o", "plain"), (0, "e", "oops")])


def test_a_progress_bar_rewritten_with_carriage_returns_is_one_line_with_its_final_state():
    code = "import sys\nfor i in range(1001): sys.stdout.write(f'\\r{i/10:.1f}%')\nsys.stdout.write('\\n')\nprint('done')"
    assert run(code) == [(0, "o", "100.0%"), (0, "o", "done")]


def test_a_progress_bar_that_never_ends_its_line_still_shows_its_latest_state():
    code = ("import sys, time\nfor i in range(3):\n sys.stdout.write(f'\\r[rank1]: step {i}/3'); sys.stdout.flush(); time.sleep(1.2)\n"
            "sys.stdout.write('\\rfinished\\n')")
    out: queue.Queue = queue.Queue()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    reader = threading.Thread(target=_pump, args=(proc.stdout, "o", out))
    reader.start()
    _, first = out.get(timeout=3)  # long before the line ends
    assert first[0][1].startswith("step ") and first[0][0] == 1
    proc.wait(10)
    reader.join(10)
    rest = first + [line for _ in range(out.qsize()) for line in out.get()[1]]
    assert len(rest) <= 4 and rest[-1] == (0, "finished")


def test_a_very_long_line_is_cut_with_a_marker_and_the_next_line_survives():
    lines = run(f"print('x' * {MAX_LINE * 10}); print('next')")
    assert len(lines) == 2
    assert lines[0][2].startswith("x" * MAX_LINE) and "line truncated" in lines[0][2]
    assert str(MAX_LINE * 9) in lines[0][2]
    assert lines[1] == (0, "o", "next")


def test_a_last_line_without_newline_is_kept():
    assert run("import sys; sys.stdout.write('no newline')") == [(0, "o", "no newline")]


def test_many_lines_arrive_in_order_and_complete():
    lines = run("import sys\nfor i in range(100000): print(i)")
    assert [int(t) for _, _, t in lines] == list(range(100000))


def test_progress_bars_and_rank_prefixes_mixed_with_plain_lines_in_one_chunk():
    code = ("import sys; sys.stdout.write('a\\n[rank1]: b\\n10%\\r20%\\r30%\\nc\\n'); "
            "print('[rank1]: \\r[rank1]: 50%\\r[rank1]: 99%')")
    assert run(code) == [(0, "o", "a"), (1, "o", "b"), (0, "o", "30%"), (0, "o", "c"), (1, "o", "99%")]


def test_invalid_utf8_does_not_stop_the_pump():
    lines = run("import sys; sys.stdout.buffer.write(b'bad \\xff\\xfe bytes\\nok\\n')")
    assert lines[0][2].startswith("bad ") and lines[1] == (0, "o", "ok")


def test_the_jobs_environment_has_none_of_the_dashboards_secrets(monkeypatch, tmp_path):
    for name in process.SECRETS:
        monkeypatch.setenv(name, "secret")
    spec = parse_spec({"data": {"dataset": "iris"}, "model": {"name": "logreg"}})
    env = process.child_env(spec, tmp_path, None, {"CUDA_VISIBLE_DEVICES": "1"})
    assert not set(process.SECRETS) & set(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)"
    guarded = process.GuardedProcess([sys.executable, "-c", code], env=dict(os.environ), cwd=tmp_path)
    assert guarded.popen.stdout.readline() == b"up\n"
    began = time.monotonic()
    guarded.terminate(grace=1.0)
    guarded.terminate(grace=30.0)  # a second request does not extend the grace
    while guarded.poll() is None:
        assert time.monotonic() - began < 10, "never killed"
        time.sleep(0.05)
    assert 1.0 <= time.monotonic() - began < 10
    assert guarded.kill() == -9  # the guard dies of the same signal as its job
