"""Log windows that come hundreds of times a second are written a few at a time (issue #12: a write per
window cost a millisecond-step run more than its arithmetic); every other event goes out at once, and
nothing held is lost when the run ends or written once the run is superseded."""
from __future__ import annotations

import time

import pytest

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


def test_held_windows_of_a_superseded_attempt_are_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "1")
    fence.claim(tmp_path, 1)
    reporter = Reporter(tmp_path)
    reporter.window(10, 100, 0, VALUES)
    reporter.window(20, 100, 0, VALUES)  # held when the job is taken over
    fence.claim(tmp_path, 2)
    with pytest.raises(fence.Superseded):
        reporter.flush()
    reporter.close()
    reporter.emit("end", status="failed")
    assert written(tmp_path) == [("progress", 10), ("metrics", 10)]


def test_a_run_with_millisecond_steps_reports_every_window_by_its_end(tmp_path):
    from tests.runner.test_step_cost import make_runner

    steps = 400
    runner = make_runner(tmp_path, steps)  # logreg on digits, batch 8: well under a millisecond a step here
    runner._train()
    progress = [e["step"] for e in read_events(runner.args.run_dir)[0] if e["type"] == "progress"]
    assert progress == list(range(10, steps + 1, 10))
