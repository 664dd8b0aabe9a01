"""Two attempts of one job in one run directory (a late-waking superseded run and the run that took its
job over) write checkpoints without touching each other's unfinished ones; leftovers never resume."""
from __future__ import annotations

import multiprocessing
import os
import sys
import traceback
from pathlib import Path

import pytest

from workers.runner import checkpoint, fence

SPEC = {"name": "attempts"}


class Strategy:
    """One rank; ``save_checkpoint`` writes ``state.pt`` and, where asked, stops in the middle of it."""
    is_main, rank = True, 0

    def __init__(self, content: bytes, pause=None):
        self.content, self.pause = content, pause

    def barrier(self):
        pass

    def save_checkpoint(self, path: Path, state):
        (path / "state.pt").write_bytes(self.content[:3])
        if self.pause:
            self.pause()
        (path / "state.pt").write_bytes(self.content)


def _save_as(attempt: int, run_dir: Path, strategy: Strategy, step: int = 4) -> None:
    """A run's process: exits 0 when its checkpoint was made, 3 when superseded, 1 on anything else."""
    os.environ["TRAINHUB_ATTEMPT"] = str(attempt)
    try:
        checkpoint.save(strategy, run_dir, step, {"step": step}, SPEC, keep_last=3)
    except fence.Superseded:
        os._exit(fence.EXIT_SUPERSEDED)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def _frozen_until(reached, go):
    def pause():
        reached.set()
        assert go.wait(30), "never woken"
    return pause


def test_a_late_attempt_waking_mid_checkpoint_leaves_the_rescuers_checkpoint_of_the_same_step_whole(tmp_path):
    ctx = multiprocessing.get_context("fork")  # each run its own process: TRAINHUB_ATTEMPT is per process
    late_frozen, late_wakes, rescuer_mid, rescuer_goes = (ctx.Event() for _ in range(4))
    fence.claim(tmp_path, 1)
    late = ctx.Process(target=_save_as, args=(1, tmp_path, Strategy(b"late!", _frozen_until(late_frozen, late_wakes))))
    late.start()
    rescuer = None
    try:
        assert late_frozen.wait(30), "the late run never started its checkpoint"
        fence.claim(tmp_path, 2)  # its worker lost the lease; another worker runs attempt 2 here
        rescuer = ctx.Process(target=_save_as,
                              args=(2, tmp_path, Strategy(b"rescuer", _frozen_until(rescuer_mid, rescuer_goes))))
        rescuer.start()
        assert rescuer_mid.wait(30), "the rescuer never started its checkpoint"
        late_wakes.set()  # the late run finishes its write while the rescuer is in the middle of its own
        late.join(30)
        rescuer_goes.set()
        rescuer.join(30)
    finally:
        late_wakes.set()
        rescuer_goes.set()
        for proc in (late, rescuer):
            if proc is not None and proc.is_alive():
                proc.kill()

    assert rescuer.exitcode == 0, "the rescuer's checkpoint failed"
    assert late.exitcode == fence.EXIT_SUPERSEDED
    assert (tmp_path / "checkpoints" / "step-4" / "state.pt").read_bytes() == b"rescuer"
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step-4"
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-4"]


def test_each_attempt_writes_a_checkpoint_into_its_own_temporary_directory(tmp_path, monkeypatch):
    seen = []

    class Recording(Strategy):
        def save_checkpoint(self, path, state):
            seen.append(path.name)
            super().save_checkpoint(path, state)

    for attempt in ("1", "2"):
        monkeypatch.setenv("TRAINHUB_ATTEMPT", attempt)
        fence.claim(tmp_path, int(attempt))
        checkpoint.save(Recording(b"w"), tmp_path, 4, {"step": 4}, SPEC, keep_last=3)
    monkeypatch.delenv("TRAINHUB_ATTEMPT")
    checkpoint.save(Recording(b"w"), tmp_path, 4, {"step": 4}, SPEC, keep_last=3)  # the bare runner

    assert seen == [".tmp-step-4-a1", ".tmp-step-4-a2", ".tmp-step-4"]
    assert all(name.startswith(".tmp-step-") for name in seen), "the web and resume treat this prefix as unfinished"


@pytest.mark.parametrize("leftover", [".tmp-step-6", ".tmp-step-6-a1", ".tmp-step-2-a2"])
def test_a_crashed_attempts_half_written_checkpoint_is_never_resumed_and_the_next_save_removes_it(
        tmp_path, monkeypatch, leftover):
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "2")
    fence.claim(tmp_path, 2)
    (tmp_path / "checkpoints" / leftover).mkdir(parents=True)
    (tmp_path / "checkpoints" / leftover / "state.pt").write_bytes(b"hal")

    assert checkpoint.latest(tmp_path) is None
    checkpoint.save(Strategy(b"whole"), tmp_path, 2, {"step": 2}, SPEC, keep_last=3)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-2"]
    assert checkpoint.latest(tmp_path) == tmp_path / "checkpoints" / "step-2"


def test_a_newer_attempts_unfinished_checkpoint_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINHUB_ATTEMPT", "2")
    fence.claim(tmp_path, 2)
    (tmp_path / "checkpoints" / ".tmp-step-6-a3").mkdir(parents=True)  # attempt 3 is writing; we will be fenced
    checkpoint.save(Strategy(b"whole"), tmp_path, 2, {"step": 2}, SPEC, keep_last=3)
    assert (tmp_path / "checkpoints" / ".tmp-step-6-a3").is_dir()
