"""The runner and its torchrun leave as soon as training is done: no interpreter teardown (seconds
of garbage collection over torch's objects, docs/BENCHMARKS.md), but everything a normal exit does
that a job needs — atexit handlers, every line flushed, the checkpoint and the event stream on disk."""
from __future__ import annotations

import subprocess
import textwrap

import pytest

from tests.runner.conftest import Result, command
from workers.runner.launch import RANK_LINE

pytestmark = pytest.mark.no_db

# Loaded into every Python process of the job (PYTHONPATH): notes each process's atexit handlers
# and its interpreter teardown, which deallocates this module's object and so calls its __del__.
PROBE = textwrap.dedent("""
    import atexit, os

    NOTES = os.environ["FASTEXIT_NOTES"]

    def note(what, _open=os.open, _write=os.write, _close=os.close, _pid=os.getpid):
        fd = _open(NOTES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _write(fd, f"{what} {_pid()}\\n".encode())
        _close(fd)

    class Teardown:
        def __del__(self, _note=note):
            _note("teardown")

    WATCH = Teardown()
    atexit.register(note, "atexit")
""")


def _run(spec: dict, tmp_path) -> tuple[Result, list[str]]:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    notes = tmp_path / "notes.txt"
    argv, env, cwd, run_dir = command(spec, tmp_path)
    env.update(PYTHONPATH=f"{probe}:{env['PYTHONPATH']}", FASTEXIT_NOTES=str(notes))
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    return Result(proc.returncode, proc.stdout, proc.stderr, run_dir), notes.read_text().split("\n")[:-1]


def _spec(mode: str, procs: int) -> dict:
    return {"name": "fastexit", "mode": mode, "resources": {"procs_per_node": procs},
            "data": {"dataset": "digits", "batch_size": 64}, "model": {"name": "mlp", "hidden": 32},
            "train": {"epochs": 1, "max_steps": 4, "log_every_steps": 2}, "checkpoint": {"every_steps": 0}}


@pytest.mark.slow
def test_a_ddp_jobs_ranks_and_torchrun_skip_the_interpreter_teardown_but_run_atexit_and_keep_every_line(tmp_path):
    result, notes = _run(_spec("ddp", 2), tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    kinds = sorted(note.split()[0] for note in notes)
    assert kinds == ["atexit"] * 3, notes  # torchrun and two ranks: atexit ran, teardown never began
    # the last lines each rank printed went through torchrun's tee before everything ended
    assert "[rank0]: wrote model.pt" in result.stdout
    assert {int(m.group(1)) for line in result.stdout.splitlines() if (m := RANK_LINE.match(line))} == {0, 1}
    assert result.of_type("end")[-1]["status"] == "succeeded"
    assert (result.run_dir / "checkpoints" / "step-4").is_dir() and (result.run_dir / "model.pt").is_file()


@pytest.mark.slow
def test_a_one_process_job_skips_the_interpreter_teardown_and_still_flushes_its_last_line(tmp_path):
    result, notes = _run(_spec("centralized", 1), tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert [note.split()[0] for note in notes] == ["atexit"], notes
    assert result.stdout.rstrip().endswith("wrote model.pt")
    assert result.of_type("end")[-1]["status"] == "succeeded"


@pytest.mark.slow
def test_a_failing_rank_still_fails_the_launch_with_torchruns_report(tmp_path):
    broken = tmp_path / "run" / "checkpoints" / "step-2"
    broken.mkdir(parents=True)
    (broken / "state.pt").write_bytes(b"not a checkpoint")  # every rank fails to resume from it
    result, notes = _run(_spec("ddp", 2), tmp_path)

    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "ChildFailedError" in result.stderr  # torchrun's own report, as `python -m torch.distributed.run` prints it
    assert "teardown" not in " ".join(notes), notes


def test_leaving_a_ddp_process_group_does_not_sweep_every_object_for_garbage():
    # A full collection over torch's objects costs 0.25–0.4 s a rank; only DeepSpeed's cycles need it.
    import gc
    import socket
    from types import SimpleNamespace

    import torch.distributed as dist

    from workers.runner import lifecycle
    from workers.runner.config import parse_spec

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    collections = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.disable()  # so that any collection seen is one asked for
    gc.callbacks.append(seen)
    try:
        lifecycle.teardown(SimpleNamespace(spec=parse_spec({"mode": "ddp"})))
    finally:
        gc.callbacks.remove(seen)
        if was_enabled:
            gc.enable()

    assert not dist.is_initialized()
    assert collections == []
