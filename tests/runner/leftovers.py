"""Run the runner like ``python -m workers.runner``, then report what it left alive in this rank.

Used by test_distributed under torchrun: one ``LEFTOVERS {...}`` JSON line per rank, printed
after ``main()`` returned (teardown done), before the interpreter starts to exit.
"""
import gc
import json
import os
import sys

from workers.runner.__main__ import main

code = main(sys.argv[1:])
gc.collect()
threads = []
for tid in os.listdir("/proc/self/task"):
    try:
        threads.append(open(f"/proc/self/task/{tid}/comm").read().strip())
    except OSError:  # the thread ended meanwhile
        pass
alive = sorted({type(o).__name__ for o in gc.get_objects()
                if type(o).__name__ in ("DeepSpeedEngine", "DeepSpeedZeroOptimizer_Stage3")})
print("LEFTOVERS " + json.dumps({"rank": os.environ.get("RANK"), "engines": alive,
                                 "gloo_threads": sum(t == "pt_gloo_runloop" for t in threads)}), flush=True)
sys.exit(code)
