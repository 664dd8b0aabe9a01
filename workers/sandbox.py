"""A job's process tree in a bubblewrap sandbox: the bwrap argv prefix and the job's allow-listed
environment, built from plain values (no namespace is needed to build them, so tests can read them).

What the job sees: the system (/usr, /etc's few files a program needs), the Python environment and
the project read-only; the workspace and the spec's data roots read-only; its own run directory
read-write; a private /tmp (a tmpfs of at most ``TRAINHUB_SANDBOX_TMP_BYTES``, gone with the job); no other run directory and no var/ (tmpfs over them); only its leased
GPUs' device nodes; no network unless allowed (a gang shares the host's, for the rendezvous); and
only the environment variables of ``allowed_env``. ``docs/SECURITY.md`` names each property's test.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

REQUIRED, OFF = "required", "off"
MODES = (REQUIRED, OFF)
INSTALL_HINT = "install bubblewrap: apt-get install bubblewrap, or set the pool's sandbox to off"
#: where the GPU device nodes are; tests point it at a folder of fake nodes
DEVICE_DIR_ENV = "TRAINHUB_DEVICE_DIR"
#: /etc files a Python job needs (users, name service, libraries, time, TLS roots); not shadow, not ssh keys
ETC_FILES = ("passwd", "group", "nsswitch.conf", "hosts", "host.conf", "resolv.conf", "gai.conf", "localtime",
             "timezone", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
             "mime.types", "os-release")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
#: device nodes every CUDA process opens besides its GPUs'
NVIDIA_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")

#: the environment a sandboxed job gets: these names, and names starting with these prefixes.
#: The worker's own settings and credentials (DATABASE_URL, REDIS_URL, *_PASSWORD, AWS_*, …) are not here.
ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
    "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "DS_ACCELERATOR", "DS_BUILD_OPS", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM", "PET_LOCAL_ADDR", "CUBLAS_WORKSPACE_CONFIG",
})
ALLOWED_PREFIXES = ("LC_", "TRAINHUB_", "NCCL_", "GLOO_", "TORCH", "TORCHELASTIC_", "PET_", "CUDA_MODULE_")
#: TRAINHUB_ names that are the worker's, not the job's
DENIED_NAMES = frozenset({"TRAINHUB_SECRET_KEY", "TRAINHUB_ADMIN_PASSWORD", "TRAINHUB_VAR_DIR", "TRAINHUB_RUNS_DIR",
                          "TRAINHUB_DEVICE_DIR", "TRAINHUB_FAKE_GPUS"})
_SECRET = re.compile(r"(PASSWORD|SECRET|TOKEN|CREDENTIAL|_KEY)$|^(AWS|GOOGLE|AZURE)_")


def available() -> bool:
    return shutil.which("bwrap") is not None


def default_mode() -> str:
    """``required`` where bubblewrap is installed, else ``off``."""
    return REQUIRED if available() else OFF


def allowed_env(env: dict[str, str], run_dir: str | Path) -> dict[str, str]:
    """The part of ``env`` a sandboxed job may see, with HOME in its run directory."""
    out = {k: v for k, v in env.items() if _allowed(k)}
    out["HOME"] = str(run_dir)
    return out


def _allowed(name: str) -> bool:
    if name in DENIED_NAMES or (_SECRET.search(name) and name not in ALLOWED_NAMES):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


@dataclass(frozen=True)
class Plan:
    """What one sandbox shows the job. Paths are absolute; ``project`` is the checkout (PYTHONPATH)."""

    run_dir: Path
    cwd: Path
    project: Path
    env: dict[str, str] = field(repr=False)
    read_only: tuple[Path, ...] = ()  # the workspace, the places of the spec's paths (jobs.specpaths)
    read_write: tuple[Path, ...] = ()  # shared caches the job must write (TORCH_EXTENSIONS_DIR)
    hidden: tuple[Path, ...] = ()  # the runs root, var/: tmpfs over them
    gpus: tuple[int, ...] = ()
    network: bool = False
    device_dir: Path = Path("/dev")
    pythons: tuple[Path, ...] = ()
    tmp_bytes: int | None = None  # the size of its private /tmp; None: TRAINHUB_SANDBOX_TMP_BYTES, 0: no size


def tmp_bytes() -> int:
    """``TRAINHUB_SANDBOX_TMP_BYTES``: the size of a sandboxed job's private /tmp (a tmpfs, in memory)."""
    from django.conf import settings

    return settings.TRAINHUB_SANDBOX_TMP_BYTES


def python_roots() -> tuple[Path, ...]:
    """The Python environment: the venv, its base installation, and where the interpreter really lives."""
    real = Path(os.path.realpath(sys.executable)).parent.parent
    return tuple(dict.fromkeys(Path(p) for p in (sys.prefix, sys.base_prefix, real)))


def gpu_indexes(env: dict[str, str]) -> tuple[int, ...]:
    """The leased GPUs, from the lease's CUDA_VISIBLE_DEVICES (indexes only; empty: none)."""
    raw = env.get("CUDA_VISIBLE_DEVICES", "")
    return tuple(int(x) for x in raw.split(",") if x.strip().isdigit())


def argv(plan: Plan) -> list[str]:
    """``bwrap ... --`` for ``plan``; append the job's own argv. Mount order matters: later mounts
    lie over earlier ones, so the hidden trees come after the project and before the run directory."""
    cmd = ["bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
           "--unshare-cgroup-try", "--cap-drop", "ALL"]  # the host's name stays: gloo and c10d resolve it
    if not plan.network:
        cmd.append("--unshare-net")
    cmd += _system(plan.network)
    # first: Python, the project or the run directory may live under /tmp (a CI clone); sized, since a
    # tmpfs is memory: a job filling /tmp must not take the host's RAM from the jobs beside it
    size = tmp_bytes() if plan.tmp_bytes is None else plan.tmp_bytes
    cmd += [*(["--size", str(size)] if size else []), "--tmpfs", "/tmp"]
    for root in _roots(plan.pythons) + _roots((plan.project,)):
        cmd += _ro(root)
    # a data root above the runs root or var/ must not show them: hidden trees go over such roots,
    # and what the job may read inside them (another of its owner's run dirs) is bound after
    under_hidden = [p for p in plan.read_only if any(_within(p, h) for h in plan.hidden)]
    for path in _roots(p for p in plan.read_only if p not in under_hidden):
        cmd += _ro(path)
    for path in plan.hidden:
        if path.is_dir():  # a missing one hides nothing, and bwrap cannot create it inside a read-only bind
            cmd += ["--tmpfs", str(path)]
    for path in dict.fromkeys(q for p in under_hidden for q in (p, Path(os.path.realpath(p)))):
        cmd += ["--ro-bind-try", str(path), str(path)]
    for path in plan.read_write:
        cmd += ["--bind-try", str(path), str(path)]
    cmd += ["--bind", str(plan.run_dir), str(plan.run_dir), "--proc", "/proc", "--dev", "/dev"]
    cmd += _devices(plan.device_dir, plan.gpus)
    cmd += ["--chdir", str(plan.cwd), "--clearenv"]
    for name, value in sorted(allowed_env(plan.env, plan.run_dir).items()):
        cmd += ["--setenv", name, value]
    # the outer bwrap ignores the group's SIGTERM (it would kill the sandbox at once); the job gets it
    return ["env", "--ignore-signal=TERM", *cmd, "--", "env", "--default-signal=TERM"]


def _system(network: bool) -> list[str]:
    cmd: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # merged /usr: /lib -> usr/lib
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    for name in ETC_FILES:
        if name != "resolv.conf" or network:  # without a network a name server only makes lookups wait for it
            cmd += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return cmd


def _roots(paths) -> list[Path]:
    """Each path and, where it is a symlink (a venv linked from elsewhere), its target too."""
    out: list[Path] = []
    for path in paths:
        for p in (Path(path), Path(os.path.realpath(path))):
            if p not in out:
                out.append(p)
    return out


def _within(path: Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


def _ro(path: Path) -> list[str]:
    if path.is_symlink():
        return ["--symlink", os.readlink(path), str(path)]
    return ["--ro-bind-try", str(path), str(path)]


def _devices(device_dir: Path, gpus: tuple[int, ...]) -> list[str]:
    if not gpus:
        return []
    names = [f"nvidia{i}" for i in gpus] + [n for n in NVIDIA_SHARED if (device_dir / n).exists()]
    cmd: list[str] = []
    for name in names:
        cmd += ["--dev-bind-try", str(device_dir / name), f"/dev/{name}"]
    return cmd
