"""One node of a Slurm job: ``srun`` starts this once per node of the allocation.

``python -m workers.slurm_node --job J --token T --nodes N -- ARGV...``

It fills in the rendezvous from the allocation — ``@NODE_RANK@`` becomes ``SLURM_NODEID``,
``@RDZV_HOST@`` the first node of ``SLURM_JOB_NODELIST`` (its NodeAddr), and ``@NODE_ADDR@`` in
an environment value this node's own NodeAddr (a cross-site job's site advertises it) — starts ARGV as a
guarded process group (``workers.backends.local``, the same as on a TrainHub worker), and
forwards every line to the worker through Redis (``workers.gang_logs``, as a gang's other nodes
do), so compute nodes need no filesystem shared with the web host for the log. A complete copy
stays in ``<run dir>/logs/node<R>.out``. SIGTERM (``scancel --signal=TERM``) asks the job to
stop (the runner checkpoints); the group is killed after ``TRAINHUB_GRACE_SECONDS``.

The Redis address comes in ``TRAINHUB_SLURM_REDIS_URL`` and is taken out of the job's
environment with the other secrets, so training code never sees it.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

NODE_RANK = "@NODE_RANK@"
RDZV_HOST = "@RDZV_HOST@"
NODE_ADDR = "@NODE_ADDR@"
REDIS_VAR = "TRAINHUB_SLURM_REDIS_URL"
#: a node's exit code when it stopped on Slurm's warning before the time limit (sbatch --signal)
TIME_LIMIT_EXIT = 124
#: Slurm may send --signal's warning up to a minute early
WARNING_SLACK_SECONDS = 75


def rendezvous_port(slurm_job_id: int) -> int:
    """A port every node derives alike from the Slurm job id (no coordination needed)."""
    return 20000 + slurm_job_id % 20000


def fill(argv: list[str], node_rank: int, rdzv_host: str) -> list[str]:
    return [a.replace(NODE_RANK, str(node_rank)).replace(RDZV_HOST, rdzv_host) for a in argv]


def _setup_django(redis_url: str) -> None:
    # gang_logs reaches Redis through the dashboard's settings; nothing here touches the database
    os.environ["REDIS_URL"] = redis_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
    import django

    django.setup()


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.slurm_node")
    parser.add_argument("--job", type=int, required=True)
    parser.add_argument("--token", type=int, required=True)
    parser.add_argument("--procs-per-node", type=int, default=1)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--stream", default="", help="the Redis stream for the lines (default: the job's)")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    opts = parser.parse_args(args)
    argv = opts.argv[1:] if opts.argv[:1] == ["--"] else opts.argv
    node = int(os.environ.get("SLURM_NODEID", "0"))
    redis_url = os.environ.pop(REDIS_VAR, "")
    _setup_django(redis_url)

    from workers import gang_logs, process, slurm_cli
    from workers.backends.base import RunRequest
    from workers.backends.local import LocalBackend

    env = {k: v for k, v in os.environ.items() if k not in process.SECRETS and k != REDIS_VAR}
    if any(RDZV_HOST in a for a in argv):
        first = slurm_cli.hostnames(os.environ["SLURM_JOB_NODELIST"], dict(os.environ))[0]
        host = slurm_cli.node_address(first, dict(os.environ))
        argv = fill(argv, node, f"{host}:{rendezvous_port(int(os.environ['SLURM_JOB_ID']))}")
    argv = fill(argv, node, "")
    if any(NODE_ADDR in v for v in env.values()):
        me = slurm_cli.node_address(os.environ.get("SLURMD_NODENAME", ""), dict(os.environ))
        env = {k: v.replace(NODE_ADDR, me) for k, v in env.items()}
    log_dir = Path(opts.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    handle = LocalBackend().start(RunRequest(argv=argv, env=env, cwd=os.getcwd(), run_dir=log_dir.parent,
                                             job_id=opts.job, attempt=0, node_rank=node,
                                             first_rank=node * opts.procs_per_node))
    grace = float(os.environ.get("TRAINHUB_GRACE_SECONDS", "15"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    sender = gang_logs.Sender(opts.job, opts.token, node, first_rank=node * opts.procs_per_node)
    sender.key = opts.stream or sender.key
    with open(log_dir / f"node{node}.out", "a", encoding="utf-8") as out:
        def forward() -> None:
            for stream, items in handle.lines():
                out.write("".join(f"[rank{r}]: {text}\n" for r, text in items))
                sender.add(stream, items)
            out.flush()
            sender.flush()

        cancelled = time_limit = False
        while handle.poll() is None:
            time.sleep(0.05)
            forward()
            if stop.is_set() and not cancelled:
                cancelled = True
                handle.cancel(grace)
                left = slurm_cli.time_left(os.environ.get("SLURM_JOB_ID", ""), dict(os.environ))
                time_limit = left is not None and left <= grace + 10 + WARNING_SLACK_SECONDS
        code = handle.poll()
        handle.close(5.0)
        forward()
    sender.close()
    if time_limit:
        return TIME_LIMIT_EXIT
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
