"""Overhead of the log pipeline on training: steps/s of a CPU-bound loop that prints a line
per step (bench/log_printer.py train), run directly with stdout to a file ("without") and as
a job on a real worker whose executor pumps every line to the database and Redis ("with").
Runs alternate; the ratio of medians is reported.

    .venv/bin/python bench/log_overhead.py [--steps 3000] [--runs 3]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from log_common import ROOT, Stack


def direct(steps: int, out) -> float:
    subprocess.run([sys.executable, str(ROOT / "bench" / "log_printer.py"), "train", str(steps)],
                            stdout=out, stderr=subprocess.DEVNULL, check=True)
    out.seek(0)
    rate = float(out.read().decode().strip().rsplit("\n", 1)[-1].split()[1])
    out.seek(0)
    out.truncate()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with Stack(web=False) as stack:
        from trainhub.jobs.models import LogLine

        without, with_ = [], []
        with open(stack.tmp / "direct.out", "w+b") as out:
            for _ in range(args.runs):
                without.append(direct(args.steps, out))
                job = stack.submit("train", str(args.steps), name="overhead")
                job = stack.wait_final(job.pk)
                last = LogLine.objects.filter(job_id=job.pk, text__startswith="steps/s ").values_list("text", flat=True)
                with_.append(float(last[0].split()[1]))
        a, b = statistics.median(without), statistics.median(with_)
        print(f"steps/s without pipeline {without} median {a:.1f}; with pipeline {with_} median {b:.1f}; "
              f"ratio {b / a:.3f}")


if __name__ == "__main__":
    main()
