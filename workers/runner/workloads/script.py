"""Script mode standalone: ``python -m workers.runner --config job.yaml --workspace-dir DIR``.

The team's own ``train.py`` (or ``pkg.train`` module) is the workload. Here it is started
the way the executor starts it (``workers.runner.launch.argv``/``env``: python or torchrun with the
job's resources, ``script.args`` as separate argv items, cwd the workspace) and this process
records ``start``/``end`` events and forwards SIGTERM/SIGINT to it. The script sees
``TRAINHUB_RUN_DIR`` (write artifacts there) and torchrun's RANK/LOCAL_RANK/WORLD_SIZE.
"""
from __future__ import annotations

import signal
import subprocess
import sys

from workers.runner.arguments import Arguments
from workers.runner.config import SpecError, dump_yaml
from workers.runner.report import Reporter


def run(args: Arguments) -> int:
    """Run the script to completion; returns its exit code."""
    from workers.runner import launch  # argv building is shared with the executor (pure, no Django/Celery)

    if args.workspace_dir is None:
        raise SpecError({"script.workspace": "standalone runs need --workspace-dir DIR (the directory "
                                             f"registered as workspace {args.spec.script.workspace!r})"})
    cmd = launch.argv(args.spec, args.config_path or "", args.run_dir, workspace_dir=args.workspace_dir)
    env = launch.env(args.spec, args.run_dir, workspace_dir=args.workspace_dir)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    (args.run_dir / "config.resolved.yaml").write_text(dump_yaml(args.spec), encoding="utf-8")
    reporter = Reporter(args.run_dir)
    reporter.emit("start", world_size=args.spec.world_size, strategy="script", argv=cmd)
    print(f"{args.spec.name}: running {' '.join(cmd)}", flush=True)
    proc = subprocess.Popen(cmd, env=env, cwd=launch.cwd(args.spec, args.run_dir, args.workspace_dir))
    stopped: list[int] = []

    def forward(signum, frame):
        stopped.append(signum)
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    status = "interrupted" if stopped else ("succeeded" if code == 0 else "failed")
    reporter.emit("end", status=status, reason="" if code == 0 else f"script exited with code {code}",
                  exit_code=code)
    reporter.close()
    if code != 0:
        print(f"script exited with code {code}", file=sys.stderr, flush=True)
    return code
