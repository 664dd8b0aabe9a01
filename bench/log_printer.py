"""The job the live-log benchmarks run (script mode): prints numbered, timestamped lines.

    log_printer.py COUNT RATE     # RATE lines/s (0 = as fast as possible)
Each line is ``<i> <time.time()>``; with RATE > 0 every line is flushed as it is printed.
"""
import sys
import time


def main() -> None:
    count, rate = int(sys.argv[1]), float(sys.argv[2])
    out = sys.stdout
    if rate <= 0:
        block = 10_000
        for start in range(0, count, block):
            now = time.time()
            out.write("".join(f"{i} {now:.6f}\n" for i in range(start, min(count, start + block))))
        out.flush()
        return
    t0 = time.perf_counter()
    wall0 = time.time()
    for i in range(count):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        out.write(f"{i} {wall0 + (time.perf_counter() - t0):.6f}\n")
        out.flush()


if __name__ == "__main__":
    main()
