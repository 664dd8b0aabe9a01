"""Script mode: a team's own train.py in a registered workspace, started with the job's resources."""
from __future__ import annotations

import os

import pytest

from tests.runner.conftest import run_module, write_spec
from workers.runner import launch
from workers.runner.config import SpecError, parse_spec

TRAIN_PY = '''
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"hello from rank {dist.get_rank()} of {dist.get_world_size()} argv={sys.argv[1:]} cwd={os.getcwd()}")
if dist.get_rank() == 0:
    open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "result.txt"), "w").write("done")
dist.destroy_process_group()
'''


def _script_spec(entry="train.py", **script) -> dict:
    return {"name": "team", "mode": "script", "resources": {"procs_per_node": 2},
            "script": {"workspace": "team", "entry": entry, "launcher": "torchrun",
                       "args": ["--lr", "0.1", "$(touch /tmp/pwned)", "a b"], **script}}


@pytest.mark.slow
def test_a_team_script_runs_under_torchrun_with_inert_args_and_tagged_lines(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").write_text(TRAIN_PY)
    config = write_spec(tmp_path, _script_spec())
    run_dir = tmp_path / "run"
    out = run_module(["--config", str(config), "--run-dir", str(run_dir), "--workspace-dir", str(workspace)], tmp_path)

    assert out.returncode == 0, out.stderr[-2000:]
    args = "argv=['--lr', '0.1', '$(touch /tmp/pwned)', 'a b']"
    assert f"[rank0]: hello from rank 0 of 2 {args} cwd={workspace}" in out.stdout
    assert f"[rank1]: hello from rank 1 of 2 {args} cwd={workspace}" in out.stdout
    assert (run_dir / "result.txt").read_text() == "done"
    assert '"status": "succeeded"' in (run_dir / "events.jsonl").read_text()


def test_script_argv_puts_each_user_arg_in_its_own_item(tmp_path):
    (tmp_path / "train.py").write_text("")
    spec = parse_spec(_script_spec())
    argv = launch.argv(spec, "job.yaml", tmp_path / "run", workspace_dir=tmp_path)

    assert argv[-6:] == [str(launch.SCRIPT_ENTRY), str((tmp_path / "train.py").resolve()),
                         "--lr", "0.1", "$(touch /tmp/pwned)", "a b"]
    assert "--tee" in argv and "--standalone" in argv


def test_a_module_entry_runs_with_the_workspace_on_the_path(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text("")
    spec = parse_spec(_script_spec("pkg.train", launcher="python") | {"resources": {"procs_per_node": 1}})

    assert launch.argv(spec, "job.yaml", tmp_path / "run", workspace_dir=tmp_path)[1:3] == ["-m", "pkg.train"]
    env = launch.env(spec, tmp_path / "run", workspace_dir=tmp_path, base={})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path.resolve())
    assert launch.cwd(spec, tmp_path / "run", tmp_path) == str(tmp_path.resolve())


@pytest.mark.parametrize("entry", ["../train.py", "/etc/passwd", "sub/../../train.py", "..\\train.py"])
def test_entries_leaving_the_workspace_are_refused_when_the_spec_is_validated(entry):
    with pytest.raises(SpecError) as err:
        parse_spec(_script_spec(entry))
    assert "no '..'" in err.value.errors["script.entry"]


@pytest.mark.parametrize("entry", ["../train.py", "/etc/passwd"])
def test_resolve_entry_refuses_dot_dot_and_absolute_paths(tmp_path, entry):
    with pytest.raises(SpecError) as err:
        launch.resolve_entry(tmp_path, entry)
    assert "script.entry" in err.value.errors


def test_resolve_entry_refuses_a_symlink_leading_out_of_the_workspace(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("print('escaped')")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").symlink_to(outside)
    (workspace / "pkg").symlink_to(tmp_path)

    for entry in ("train.py", "pkg.outside"):
        with pytest.raises(SpecError) as err:
            launch.resolve_entry(workspace, entry)
        assert "leads outside the workspace" in err.value.errors["script.entry"]


def test_resolve_entry_names_a_missing_script_and_a_missing_workspace(tmp_path):
    with pytest.raises(SpecError) as err:
        launch.resolve_entry(tmp_path, "nope.py")
    assert "not found in the workspace" in err.value.errors["script.entry"]
    with pytest.raises(SpecError) as err:
        launch.resolve_entry(tmp_path / "missing", "train.py")
    assert "script.workspace" in err.value.errors


def test_a_python_launcher_for_two_processes_is_refused():
    with pytest.raises(SpecError) as err:
        parse_spec(_script_spec(launcher="python"))
    assert "use torchrun" in err.value.errors["script.launcher"]


@pytest.mark.slow
def test_a_team_scripts_ranks_die_when_torchrun_is_killed_outright(tmp_path):
    import signal
    import subprocess

    import psutil

    from tests.runner.conftest import command

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").write_text("import time\nprint('training', flush=True)\ntime.sleep(600)\n")
    argv, env, cwd, run_dir = command(_script_spec(args=[]), tmp_path, workspace=workspace)
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    seen = 0
    for line in proc.stdout:
        seen += "training" in line
        if seen == 2:
            break
    ranks = [p for p in psutil.Process(proc.pid).children(recursive=True) if "train.py" in " ".join(p.cmdline())]
    assert len(ranks) == 2
    proc.kill()
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(ranks, timeout=10)
    for p in alive:
        p.send_signal(signal.SIGKILL)
    assert alive == []
