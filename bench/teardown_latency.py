"""How long a job's processes take to be gone once training is done: from the runner's ``end`` event
(the bare script's last line) to the launcher's exit, with no dashboard in between.

    .venv/bin/python bench/teardown_latency.py [--repeats 3] [--samples 4000] [--epochs 1]

Variants, interleaved (one of each per repeat, so that load from other work hits them alike):

- ``ddp_fastexit``: a 2-rank DDP job as the executor starts it (``launch.argv``: torchrun through
  ``workers/runner/fastexit.py``, each rank's runner leaving through ``exit_now``);
- ``ddp_normal_exit``: the same runner and spec, but ``python -m torch.distributed.run`` and each rank
  ending with ``sys.exit(main())`` — the interpreter's full teardown, as before fastexit;
- ``ddp_bare``: the bare DDP script (bench/bare.py) under ``torchrun``, from its last printed line;
- ``one_fastexit`` / ``one_normal_exit``: the one-process runner, both ways.

Wall seconds on a shared machine: read the medians and the spread. Raw JSON to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import bare, record  # noqa: E402
from workers.runner import launch  # noqa: E402
from workers.runner.config import dump_yaml, parse_spec  # noqa: E402

NORMAL_EXIT = "import sys\nfrom workers.runner.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"


def timed_run(argv: list[str], env: dict, cwd: Path) -> tuple[float, float | None, int]:
    """Run ``argv``; (when it exited, when its last stdout line came, its exit code), wall clock."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    last: list[float] = []

    def read() -> None:
        for _ in proc.stdout:
            last[:] = [time.time()]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    exited = time.time()
    reader.join(10)
    return exited, (last[0] if last else None), code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=1)
    ns = parser.parse_args()
    load_at_start = list(os.getloadavg())
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-teardown-"))
    (tmp / "normal_exit.py").write_text(NORMAL_EXIT)
    (tmp / "bare_ddp.py").write_text(bare.SYNTHETIC_DDP)

    def spec(mode: str, procs: int) -> dict:
        return {"name": f"teardown-{mode}", "mode": mode, "resources": {"procs_per_node": procs},
                "data": {"dataset": "synthetic", "samples": ns.samples, "batch_size": 64},
                "model": {"name": "mlp", "hidden": 128, "layers": 2},
                "train": {"epochs": ns.epochs, "log_every_steps": 10**6}, "checkpoint": {"every_steps": 0}}

    def runner(mode: str, procs: int, fast: bool, n: int) -> float:
        run_dir = tmp / f"{mode}-{'fast' if fast else 'normal'}-{n}"
        run_dir.mkdir()
        parsed = parse_spec(spec(mode, procs))
        config = run_dir / "job.yaml"
        config.write_text(dump_yaml(parsed))
        argv = launch.argv(parsed, config, run_dir)
        if not fast:
            at = argv.index("-m", 2) if procs > 1 else 1  # the runner's own "-m workers.runner"
            argv[at:at + 2] = [str(tmp / "normal_exit.py")]
            if procs > 1:
                argv[1:2] = ["-m", "torch.distributed.run"]
        env = {**launch.env(parsed, run_dir), "OMP_NUM_THREADS": "1"}
        exited, _, code = timed_run(argv, env, run_dir)
        assert code == 0, (argv, code)
        end = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()][-1]
        assert end["type"] == "end", end
        return exited - end["time"]

    def bare_ddp() -> float:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        exited, last, code = timed_run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                        "--nproc-per-node", "2", "bare_ddp.py", str(ns.samples), str(ns.epochs), "64"],
                                       env, tmp)
        assert code == 0 and last is not None, code
        return exited - last

    rows: dict[str, list[float]] = {k: [] for k in ("ddp_fastexit", "ddp_normal_exit", "ddp_bare",
                                                    "one_fastexit", "one_normal_exit")}
    for n in range(ns.repeats):
        rows["ddp_fastexit"].append(runner("ddp", 2, True, n))
        rows["ddp_normal_exit"].append(runner("ddp", 2, False, n))
        rows["ddp_bare"].append(bare_ddp())
        rows["one_fastexit"].append(runner("centralized", 1, True, n))
        rows["one_normal_exit"].append(runner("centralized", 1, False, n))
        print(f"repeat {n + 1}: " + " ".join(f"{k}={v[-1]:.2f}" for k, v in rows.items()), flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    print("median seconds from the end of training to the launcher's exit: "
          + " ".join(f"{k}={v:.2f}" for k, v in med.items()))
    record.write("teardown_latency", {
        "samples": ns.samples, "epochs": ns.epochs, "repeats": ns.repeats, "load_at_start": load_at_start,
        "unit": "wall seconds from the runner's end event (bare: its last stdout line) to the launcher's exit",
        "seconds": rows, "median_s": med})


if __name__ == "__main__":
    main()
