"""`make bench`: every CPU benchmark in turn, at the sizes docs/BENCHMARKS.md reports.

Each prints its own Markdown table; its whole output is also kept as a raw result under
bench/results/ (bench/record.py: command, machine, date, versions). ``--only a,b`` runs the
named scripts alone. The GPU checks (bench/gpu_check.sh, bench/gpu_paths.py) run only on a GPU
host and are not included.
"""
import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402

RUNS = [
    ["submit_latency.py", "--jobs", "20"],
    ["runner_overhead.py"],
    ["dashboard_overhead.py", "--repeats", "7", "--epochs", "5"],
    ["log_latency.py", "--seconds", "10"],
    ["log_throughput.py", "--lines", "1000000"],
    ["log_fanout.py", "--viewers", "200", "--rate", "100"],
    ["log_page.py", "--lines", "1000000"],
    ["log_search.py", "--jobs", "100000"],
    ["log_overhead.py", "--steps", "1500", "--runs", "3"],
    ["scheduling.py", "--jobs", "1000", "--slots", "2"],
    ["job_list.py", "--jobs", "100000", "--runs", "15"],
    ["llm_throughput.py", "--size", "small", "--seq-len", "256", "--batch", "8", "--steps", "10", "--via", "direct"],
]

parser = argparse.ArgumentParser()
parser.add_argument("--only", default="", help="comma-separated script names, e.g. submit_latency,log_latency")
only = {name.removesuffix(".py") for name in parser.parse_args().only.split(",") if name}
failed = []
for run in RUNS:
    if only and run[0].removesuffix(".py") not in only:
        continue
    print(f"\n## {' '.join(run)}\n", flush=True)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / run[0]), *run[1:]], cwd=ROOT / "bench",
                          stdout=subprocess.PIPE, text=True)
    print(done.stdout, end="", flush=True)
    record.write(run[0].removesuffix(".py"), {"returncode": done.returncode, "stdout": done.stdout},
                 command=[f"bench/{run[0]}", *run[1:]])
    if done.returncode:
        failed.append(run[0])
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
