"""Build the command that runs a job: argv lists (never a shell string) and its environment.

Contract with the executor::

    cmd = launch.argv(spec, config_path, run_dir, workspace_dir=ws)   # list[str]
    env = launch.env(spec, run_dir, workspace_dir=ws)                 # complete environment
    subprocess.Popen(cmd, env=env, cwd=launch.cwd(spec, run_dir, ws), start_new_session=True)

- One process (mode centralized, or script with launcher python):
  ``python -m workers.runner --config C --run-dir D`` / ``python <workspace>/train.py ARGS``.
  Its lines are not tagged; they are rank 0's.
- Several processes (ddp, deepspeed, llm with several ranks, script with torchrun or
  deepspeed): ``python workers/runner/fastexit.py --tee 3 ... -m workers.runner ...`` (torchrun,
  ``torch.distributed.run``, without its interpreter's seconds-long teardown at the end), or for a
  script ``... workers/runner/script_entry.py <workspace>/train.py ARGS`` (``-m pkg.train``). DeepSpeed
  jobs go through torchrun too (DeepSpeed reads torchrun's RANK/LOCAL_RANK/MASTER_* env), so
  tagging is uniform. Every line a rank prints (stdout and stderr) is echoed by torchrun with
  the prefix ``[rank<GLOBAL_RANK>]: `` — e.g. ``[rank1]: epoch 1/3 step 10/90 ...`` — set
  through ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` (in torch 2.13 that template is read from
  the environment, there is no command-line flag). Parse with ``RANK_LINE``
  (``^\\[rank(\\d+)\\]:\\s?``). Lines without the prefix come from torchrun itself.
  torchrun also keeps per-rank copies under ``<run_dir>/logs/``.
- Stopping: torchrun starts each rank in a session of its own, so a signal to the launcher's
  process group reaches torchrun, which forwards SIGTERM to every rank. Send SIGTERM, allow
  ``TRAINHUB_STOP_GRACE_S`` (15 s) plus a few seconds for the checkpoint, then SIGKILL. Every
  rank (the runner's, and a team's script through ``script_entry.py``) also gets SIGTERM if
  torchrun itself dies (PR_SET_PDEATHSIG), so a SIGKILL to the group leaves no rank behind.
- Several machines: pass ``nnodes``, ``node_rank``, ``rdzv_endpoint="host:port"`` (the c10d
  store, reachable from every node) and ``rdzv_id`` (same on every node, e.g. the job id).
  One machine uses ``--standalone`` (a free local port, so jobs never collide).
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from workers.runner.config import JobSpec
from workers.runner.errors import SpecError

RANK_PREFIX_TEMPLATE = "[rank${rank}]: "
RANK_LINE = re.compile(r"^\[rank(\d+)\]:\s?")
REPO_ROOT = Path(__file__).resolve().parents[2]  # workers/runner/launch.py -> the checkout (PYTHONPATH)
SCRIPT_ENTRY = Path(__file__).resolve().parent / "script_entry.py"
#: torchrun (``torch.distributed.run``) that skips its interpreter's teardown once its ranks are done
FAST_TORCHRUN = Path(__file__).resolve().parent / "fastexit.py"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def argv(spec: JobSpec, config_path: str | Path, run_dir: str | Path, *, nnodes: int | None = None,
         node_rank: int = 0, rdzv_endpoint: str | None = None, rdzv_id: str | None = None,
         workspace_dir: str | Path | None = None, python: str | None = None) -> list[str]:
    """The command for one node of ``spec``. Raises ``SpecError`` for a bad script entry."""
    python = python or sys.executable
    run_dir = str(Path(run_dir).resolve())
    if spec.workload == "script":
        if workspace_dir is None:
            raise SpecError({"script.workspace": "no directory registered for this workspace; ask an administrator"})
        target = resolve_entry(workspace_dir, spec.script.entry)
        program = [str(target)] if isinstance(target, Path) else ["-m", target]
        tail = program + list(spec.script.args)
        if not _multi_process(spec):
            return [python, *tail]
        tail = [str(SCRIPT_ENTRY), *tail]  # each rank dies with torchrun (see script_entry.py)
    else:
        tail = ["-m", "workers.runner", "--config", str(Path(config_path).resolve()), "--run-dir", run_dir]
        if not _multi_process(spec):
            return [python, *tail]
    nnodes = nnodes or spec.resources.nodes
    cmd = [python, str(FAST_TORCHRUN), "--nnodes", str(nnodes),
           "--nproc-per-node", str(spec.resources.procs_per_node)]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ValueError("a multi-node launch needs rdzv_endpoint='host:port' reachable from every node")
        cmd += ["--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", rdzv_id or spec.name]
    else:
        cmd += ["--standalone"]
    cmd += ["--tee", "3", "--log-dir", str(Path(run_dir) / "logs" / f"node{node_rank}"), "--max-restarts", "0"]
    return cmd + tail


def env(spec: JobSpec, run_dir: str | Path | None = None, *, workspace_dir: str | Path | None = None,
        base: dict[str, str] | None = None) -> dict[str, str]:
    """The complete environment for the launched command (``base`` defaults to ``os.environ``)."""
    out = dict(os.environ if base is None else base)
    paths = [str(REPO_ROOT)]
    if spec.workload == "script" and workspace_dir is not None:
        paths.insert(0, str(Path(workspace_dir).resolve()))
        out["TRAINHUB_WORKSPACE_DIR"] = paths[0]
    if out.get("PYTHONPATH"):
        paths.append(out["PYTHONPATH"])
    out["PYTHONPATH"] = os.pathsep.join(paths)
    out.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    out["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = RANK_PREFIX_TEMPLATE
    if run_dir is not None:
        out["TRAINHUB_RUN_DIR"] = str(Path(run_dir).resolve())
    if "OMP_NUM_THREADS" not in out:
        out["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // spec.resources.procs_per_node))
    if "TORCH_EXTENSIONS_DIR" not in out:
        from workers.runner.lifecycle import default_extensions_dir

        out["TORCH_EXTENSIONS_DIR"] = default_extensions_dir()
    if spec.resources.gpus_per_node == 0 and (spec.deepspeed is not None or _script_launcher(spec) == "deepspeed"):
        out["DS_ACCELERATOR"] = "cpu"
    return out


def cwd(spec: JobSpec, run_dir: str | Path, workspace_dir: str | Path | None = None) -> str:
    """Working directory: the workspace for script mode (relative paths in the team's code), else the run dir."""
    if spec.workload == "script" and workspace_dir is not None:
        return str(Path(workspace_dir).resolve())
    return str(Path(run_dir).resolve())


def resolve_entry(workspace_dir: str | Path, entry: str) -> Path | str:
    """The script file (an absolute ``Path``) or module name (``str``) ``entry`` names inside
    ``workspace_dir``. Refuses ``..``, absolute paths and symlinks leading out of the workspace."""
    root = Path(workspace_dir)
    if not root.is_dir():
        raise SpecError({"script.workspace": f"workspace directory {root} does not exist; ask an administrator"})
    root = root.resolve()
    bad = SpecError({"script.entry": f"{entry!r} must name a file or module inside the workspace "
                                     "(relative, no '..'), e.g. train.py or pkg.train"})
    if not entry or entry.startswith(("/", "\\")) or Path(entry).is_absolute() or ".." in re.split(r"[/\\]", entry):
        raise bad
    is_module = not entry.endswith(".py") and "/" not in entry and _MODULE.match(entry)
    candidates = [entry] if not is_module else [entry.replace(".", "/") + ".py",
                                                 entry.replace(".", "/") + "/__main__.py"]
    for rel in candidates:
        path = root / rel
        if not path.exists() and not path.is_symlink():
            continue
        real = path.resolve()
        if not real.is_relative_to(root):
            raise SpecError({"script.entry": f"{entry!r} leads outside the workspace (a symlink); "
                                             "put the script itself in the workspace"})
        if not real.is_file():
            continue
        return entry if is_module else real
    raise SpecError({"script.entry": f"{entry!r} not found in the workspace; check the name "
                                     "(a file like train.py or a module like pkg.train)"})


def _multi_process(spec: JobSpec) -> bool:
    if spec.workload == "script":
        return _script_launcher(spec) != "python"
    # cross-site sync: torchft's manager keeps its replica group's address in torchrun's store
    return spec.world_size > 1 or spec.strategy_name != "single" or spec.sync is not None


def _script_launcher(spec: JobSpec) -> str | None:
    return spec.script.launcher if spec.script is not None else None
