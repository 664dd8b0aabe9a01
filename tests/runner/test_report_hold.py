"""Log windows that come hundreds of times a second are written a few at a time (issue #12: a write per
window cost a millisecond-step run more than its arithmetic); every other event goes out at once, and
nothing held is lost when the run ends or written once the run is superseded."""
from __future__ import annotations

import io
import math
import subprocess
import sys
import time

import pytest
import yaml

from workers.runner import fence
from workers.runner.report import Reporter, read_events

VALUES = {"train_loss": 0.5, "lr": 0.001}


def written(run_dir) -> list[tuple[str, int]]:
    return [(e["type"], e.get("step")) for e in read_events(run_dir)[0]]


def test_windows_in_quick_succession_go_out_in_order_with_the_next_event(tmp_path):
    reporter = Reporter(tmp_path)
    reporter.window(10, 100, 0, VALUES)  # the first write of a run is never held
    reporter.window(20, 100, 0, VALUES)
    reporter.window(30, 100, 0, VALUES)
    assert written(tmp_path) == [("progress", 10), ("metrics", 10)]
    reporter.emit("checkpoint", step=30, path="checkpoints/step-30")
    assert written(tmp_path) == [("progress", 10), ("metrics", 10), ("progress", 20), ("metrics", 20),
                                 ("progress", 30), ("metrics", 30), ("checkpoint", 30)]


def test_a_window_after_a_quiet_spell_is_written_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(Reporter, "HOLD_SECONDS", 0.02)
    reporter = Reporter(tmp_path)
    reporter.window(10, 100, 0, VALUES)
    reporter.window(20, 100, 0, VALUES)  # held
    time.sleep(0.05)
    reporter.window(30, 100, 0, VALUES)  # takes the held one along
    assert [step for kind, step in written(tmp_path) if kind == "progress"] == [10, 20, 30]


def test_closing_writes_the_held_windows(tmp_path):
    reporter = Reporter(tmp_path)
    reporter.window(10, 100, 0, VALUES)
    reporter.window(20, 100, 0, VALUES)
    reporter.close()
    assert [step for kind, step in written(tmp_path) if kind == "progress"] == [10, 20]


class Writes(io.StringIO):
    """A stream that counts its writes, as the worker's pipe reader is woken once per write."""

    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_a_held_windows_line_is_printed_with_it_in_one_write_and_in_order(tmp_path):
    out = Writes()
    reporter = Reporter(tmp_path, out=out)
    reporter.window(10, 100, 0, VALUES, line="step 10")  # the first write of a run is never held
    reporter.window(20, 100, 0, VALUES, line="step 20")
    reporter.window(30, 100, 0, VALUES, line="step 30")
    assert out.getvalue() == "step 10\n"  # the held lines wait with their events
    reporter.close()
    assert out.getvalue() == "step 10\nstep 20\nstep 30\n"
    assert out.writes == 2


def test_held_windows_of_a_superseded_attempt_are_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "1")
    fence.claim(tmp_path, 1)
    out = io.StringIO()
    reporter = Reporter(tmp_path, out=out)
    reporter.window(10, 100, 0, VALUES, line="step 10")
    reporter.window(20, 100, 0, VALUES, line="step 20")  # held when the job is taken over
    fence.claim(tmp_path, 2)
    with pytest.raises(fence.Superseded):
        reporter.flush()
    reporter.close()
    reporter.emit("end", status="failed")
    assert written(tmp_path) == [("progress", 10), ("metrics", 10)]
    assert out.getvalue() == "step 10\n"  # nor its held lines


def test_a_run_with_millisecond_steps_reports_every_window_by_its_end(tmp_path):
    from tests.runner.test_step_cost import make_runner

    steps = 400
    runner = make_runner(tmp_path, steps)  # logreg on digits, batch 8: well under a millisecond a step here
    runner._train()
    progress = [e["step"] for e in read_events(runner.args.run_dir)[0] if e["type"] == "progress"]
    assert progress == list(range(10, steps + 1, 10))


def test_a_millisecond_step_runs_window_lines_all_reach_its_log_in_order_in_fewer_writes_than_windows(tmp_path):
    """Through the runner's command line, stdout a pipe and unbuffered as under a worker: every window's line
    is in the log, in step order, before the run's last lines, and they came in fewer writes than windows."""
    spec = {"name": "held-lines", "data": {"dataset": "digits", "batch_size": 8}, "model": {"name": "logreg"},
            "train": {"epochs": 3, "log_every_steps": 2}, "checkpoint": {"every_steps": 0}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    proc = subprocess.Popen([sys.executable, "-m", "workers.runner", "--config", str(tmp_path / "job.yaml"),
                             "--run-dir", str(tmp_path / "run")], stdout=subprocess.PIPE,
                            env={"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    chunks = []
    while chunk := proc.stdout.read1(1 << 16):  # one read per write while the reader keeps up
        chunks.append(chunk)
    assert proc.wait(60) == 0
    lines = b"".join(chunks).decode().splitlines()
    steps = [int(line.split()[3].split("/")[0]) for line in lines if line.startswith("epoch ")]
    total = 3 * math.ceil(1438 / 8)  # digits: 1438 training rows, batch 8 (the last batch short)
    assert steps == list(range(2, total + 1, 2)) + ([total] if total % 2 else [])
    assert lines[-1].startswith("wrote model.pt") and lines[-2].startswith("checkpoint ")
    assert len(chunks) < len(steps) / 2, f"{len(steps)} window lines in {len(chunks)} reads"
