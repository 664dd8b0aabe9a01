"""The local backend through the backend interface: what the executor and a gang's nodes see."""
from __future__ import annotations

import os
import sys
import time

import pytest

from workers import backends
from workers.backends import RunRequest

pytestmark = [pytest.mark.slow, pytest.mark.no_db]


def start(tmp_path, code: str, **env) -> backends.Handle:
    request = RunRequest(argv=[sys.executable, "-c", code], env={**os.environ, **env}, cwd=tmp_path,
                         run_dir=tmp_path, job_id=1, attempt=1)
    return backends.get("local").start(request)


def wait(handle: backends.Handle, seconds: float = 20) -> int:
    deadline = time.monotonic() + seconds
    while (code := handle.poll()) is None:
        assert time.monotonic() < deadline, "the process did not end"
        time.sleep(0.05)
    return code


def output(handle: backends.Handle) -> list[tuple[str, int, str]]:
    return [(stream, rank, text) for stream, items in handle.lines() for rank, text in items]


def test_a_run_gives_its_output_lines_and_its_exit_code(tmp_path):
    handle = start(tmp_path, "import os, sys; print('[rank1]: hi', os.environ['GREETING']); "
                             "print('oops', file=sys.stderr); sys.exit(3)", GREETING="hello")
    assert wait(handle) == 3
    handle.close(5)
    assert sorted(output(handle)) == [("e", 0, "oops"), ("o", 1, "hi hello")]
    assert "process group" in handle.describe()


def test_a_cancelled_run_gets_sigterm_and_its_last_words_are_kept(tmp_path):
    code = ("import signal, sys, time\n"
            "def bye(*_):\n    print('checkpoint saved', flush=True); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\nprint('up', flush=True)\ntime.sleep(60)")
    handle = start(tmp_path, code)
    deadline = time.monotonic() + 20
    seen = []
    while not seen:
        assert time.monotonic() < deadline
        seen = output(handle)
        time.sleep(0.05)
    handle.cancel(grace=10)
    assert wait(handle) == 0
    handle.close(5)
    assert output(handle) == [("o", 0, "checkpoint saved")]


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown backend 'slurmx': choose one of local"):
        backends.get("slurmx")
