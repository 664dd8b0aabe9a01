"""The job the live-log benchmarks run (script mode): prints numbered, timestamped lines.

    log_printer.py COUNT RATE [WAIT]  # RATE lines/s (0 = as fast as possible), after WAIT seconds
    log_printer.py train STEPS    # a CPU-bound training-like loop printing a line per step
Each line is ``<i> <time.time()>``; with RATE > 0 every line is flushed as it is printed.
The train loop's last line is ``steps/s <value>``.
"""
import sys
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core, as a rank would use it
os.environ.setdefault("OMP_NUM_THREADS", "1")


def train(steps: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    t0 = time.perf_counter()
    for step in range(steps):
        for _ in range(5):  # a few hundred microseconds of matmuls per step on an idle core
            x = np.tanh(x @ w * 0.05)
        print(f"step {step}/{steps} loss {float(x.mean()):.6f}", flush=True)
    print(f"steps/s {steps / (time.perf_counter() - t0):.2f}", flush=True)


def main() -> None:
    if sys.argv[1] == "train":
        return train(int(sys.argv[2]))
    count, rate = int(sys.argv[1]), float(sys.argv[2])
    if len(sys.argv) > 3:  # a fan-out bench connects its viewers meanwhile
        time.sleep(float(sys.argv[3]))
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
