"""`make bench`: every CPU benchmark in turn, at the sizes docs/BENCHMARKS.md reports.

Each prints its own Markdown table; copy them into docs/BENCHMARKS.md with the date and the
machine. The GPU checks (bench/gpu_check.sh, bench/gpu_paths.py) run only on a GPU host and are not included.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = [
    ["submit_latency.py", "--jobs", "20"],
    ["runner_overhead.py"],
    ["dashboard_overhead.py", "--repeats", "7", "--epochs", "5"],
    ["log_latency.py", "--seconds", "10"],
    ["log_throughput.py", "--lines", "1000000"],
    ["log_fanout.py", "--viewers", "200", "--rate", "100"],
    ["log_page.py", "--lines", "1000000"],
    ["log_overhead.py", "--steps", "1500", "--runs", "3"],
    ["scheduling.py", "--jobs", "1000", "--slots", "2"],
    ["job_list.py", "--jobs", "100000", "--runs", "15"],
    ["llm_throughput.py", "--size", "small", "--seq-len", "256", "--batch", "8", "--steps", "10", "--via", "direct"],
]

failed = []
for run in RUNS:
    print(f"\n## {' '.join(run)}\n", flush=True)
    if subprocess.run([sys.executable, str(ROOT / "bench" / run[0]), *run[1:]], cwd=ROOT / "bench").returncode:
        failed.append(run[0])
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
