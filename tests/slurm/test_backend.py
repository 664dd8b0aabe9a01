"""The slurm backend on the real two-node test cluster, without the dashboard around it."""
from __future__ import annotations

import os
import sys
import time

import psutil
import pytest

from workers import process
from workers.backends import RunRequest, get
from workers.backends.slurm import SlurmOptions, batch_script

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
HOSTILE = ["$(touch /tmp/pwned-slurm)", "`touch /tmp/pwned-slurm2`", "a\nb; touch /tmp/pwned-slurm3", "'\"\\", "*"]


def request(tmp_path, code: str, *args: str, job_id: int = 1) -> RunRequest:
    env = {k: v for k, v in os.environ.items() if k not in process.SECRETS}
    env["PYTHONPATH"] = os.getcwd()
    return RunRequest(argv=[sys.executable, "-c", code, *args], env=env, cwd=tmp_path, run_dir=tmp_path / "run",
                      job_id=job_id, attempt=1)


def options(slurm_cluster, settings, **kw) -> SlurmOptions:
    return SlurmOptions(slurm_conf=slurm_cluster, redis_url=settings.REDIS_URL, lease_token=7, **kw)


def finish(handle, seconds: float = 90) -> tuple[int, list]:
    lines, deadline = [], time.monotonic() + seconds
    while (code := handle.poll()) is None:
        assert time.monotonic() < deadline, f"{handle.describe()} did not end"
        lines += handle.lines()
        time.sleep(0.2)
    handle.close(10)
    lines += handle.lines()
    return code, [text for _stream, items in lines for _rank, text in items]


def test_a_two_node_job_runs_on_both_nodes_and_their_lines_come_back(slurm_cluster, live_settings, tmp_path):
    code = "import os; print('hello from', os.environ['SLURMD_NODENAME'], 'node', os.environ['SLURM_NODEID'])"
    handle = get("slurm", options=options(slurm_cluster, live_settings, nodes=2)).start(request(tmp_path, code))
    exit_code, texts = finish(handle)
    assert exit_code == 0
    assert sorted(texts) == ["hello from n1 node 0", "hello from n2 node 1"]
    assert handle.describe() == f"slurm job {handle.job_id} on n1,n2"
    assert (tmp_path / "run" / "logs" / "node1.out").read_text().strip() == "[rank1]: hello from n2 node 1"


def test_a_hostile_job_name_and_arguments_stay_inert(slurm_cluster, live_settings, tmp_path):
    for name in ("pwned-slurm", "pwned-slurm2", "pwned-slurm3"):
        if os.path.exists(f"/tmp/{name}"):
            os.remove(f"/tmp/{name}")
    run = request(tmp_path, "import sys; print(repr(sys.argv[1:]))", *HOSTILE)
    opts = options(slurm_cluster, live_settings, job_name="x$(touch /tmp/pwned-slurm)`id`\n'\"")
    assert "$(" not in batch_script(run, opts).split("\n", 2)[1]  # the comment line names no user string
    exit_code, texts = finish(get("slurm", options=opts).start(run))
    assert exit_code == 0
    assert texts == [repr(HOSTILE)]
    assert not any(os.path.exists(f"/tmp/{name}") for name in ("pwned-slurm", "pwned-slurm2", "pwned-slurm3"))


def test_a_failing_job_reports_its_exit_code(slurm_cluster, live_settings, tmp_path):
    handle = get("slurm", options=options(slurm_cluster, live_settings)).start(
        request(tmp_path, "import sys; print('bad'); sys.exit(3)"))
    exit_code, texts = finish(handle)
    assert (exit_code, texts) == (3, ["bad"])
    assert handle.state.state == "FAILED"


def test_cancel_stops_every_node_with_a_graceful_term_first(slurm_cluster, live_settings, tmp_path):
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: (print('got TERM', flush=True), sys.exit(5)))\n"
            "print('started', flush=True)\ntime.sleep(600)\n")
    handle = get("slurm", options=options(slurm_cluster, live_settings, nodes=2)).start(
        request(tmp_path, code, "marker-cancel-test"))
    seen, deadline = [], time.monotonic() + 60
    while sum(text == "started" for _s, items in seen for _r, text in items) < 2:
        assert time.monotonic() < deadline and handle.poll() is None
        seen += handle.lines()
        time.sleep(0.2)
    handle.cancel(grace=5)
    exit_code, texts = finish(handle)
    assert exit_code is not None and handle.reason() == "cancelled"
    assert texts.count("got TERM") == 2
    time.sleep(1)
    assert not [p for p in psutil.process_iter(["cmdline"]) if "marker-cancel-test" in (p.info["cmdline"] or [])]


def test_a_handle_attached_from_a_cursor_returns_exactly_the_lines_after_it(slurm_cluster, live_settings, tmp_path):
    """What a restarted worker does: follow the same Slurm job from the per-node count of lines
    already taken, however many lines the first handle had received but not handed out."""
    from workers.backends.slurm import SlurmHandle

    code = ("import os, time\nfor i in range(8):\n    print('node', os.environ['SLURM_NODEID'], 'line', i, flush=True)\n"
            "    time.sleep(0.3)\n")
    opts = options(slurm_cluster, live_settings, nodes=2)
    first = get("slurm", options=opts).start(request(tmp_path, code, job_id=41))
    taken, deadline = [], time.monotonic() + 90
    while sum(len(items) for _s, items in taken) < 5:
        assert time.monotonic() < deadline, "no lines"
        taken += first.lines()
        time.sleep(0.2)
    cursor = dict(first.cursor)
    first.detach()  # the worker dies here: what it received after lines() is lost with it
    second = SlurmHandle.attach(opts, first.job_id, 41, cursor, first.env)
    code_, rest = finish(second)
    before = [text for _s, items in taken for _r, text in items]
    assert code_ == 0
    assert sorted(before + rest) == sorted(f"node {n} line {i}" for n in (0, 1) for i in range(8))
    assert sum(cursor.values()) == len(before)
