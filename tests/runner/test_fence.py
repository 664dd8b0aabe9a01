"""A run superseded by a newer attempt of its job writes nothing more: no event, no checkpoint, no model."""
from __future__ import annotations

import pytest

from workers.runner import fence
from workers.runner.report import EVENTS_FILE, Reporter


def test_a_reporter_of_a_superseded_attempt_stops_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "1")
    fence.claim(tmp_path, 1)
    reporter = Reporter(tmp_path)
    reporter.emit("progress", step=1)
    fence.claim(tmp_path, 2)  # another worker took the job over
    with pytest.raises(fence.Superseded, match="superseded by attempt 2"):
        reporter.emit("progress", step=2)
    reporter.emit("end", status="failed")  # the runner's finally: silent now
    assert (tmp_path / EVENTS_FILE).read_text().count("\n") == 1


def test_the_owning_attempt_and_the_bare_runner_are_not_fenced(tmp_path, monkeypatch):
    fence.claim(tmp_path, 2)
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "2")
    fence.check(tmp_path)
    monkeypatch.delenv("TRAINHUB_ATTEMPT")
    fence.check(tmp_path)  # `python -m workers.runner` by hand: no attempt, no fence


@pytest.mark.slow
def test_a_superseded_run_exits_without_a_checkpoint_or_model(tmp_path, monkeypatch):
    from tests.runner.conftest import run_job

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fence.claim(run_dir, 5)
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "4")
    spec = {"name": "late", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1},
            "checkpoint": {"every_steps": 1}}
    result = run_job(spec, tmp_path, run_dir=run_dir)
    assert result.returncode == fence.EXIT_SUPERSEDED, result.stderr
    assert "superseded by attempt 5" in result.stderr
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())
    assert not (run_dir / "model.pt").exists()
    assert not (run_dir / EVENTS_FILE).exists() or not (run_dir / EVENTS_FILE).read_text()
