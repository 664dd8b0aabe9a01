"""What the fault tests share: a team workspace with small scripts, and log checks."""
from pathlib import Path

from trainhub.jobs.logs import iter_all
from trainhub.pools.models import Workspace

#: prints ``tick 0`` … ``tick N-1``, one every ``DELAY`` seconds (argv: N DELAY)
TICKER = """import sys, time
n, delay = int(sys.argv[1]), float(sys.argv[2])
for i in range(n):
    print(f"tick {i}", flush=True)
    time.sleep(delay)
"""
#: says hello, then sleeps without a word
SILENT = """import time
print("hello, then silence", flush=True)
time.sleep(600)
"""
#: writes ``MB`` megabytes into its run directory (argv: MB)
FILLER = """import os, sys
with open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "blob.bin"), "wb") as fh:
    for _ in range(int(sys.argv[1])):
        fh.write(b"x" * (1 << 20))
        fh.flush()
"""


def team_workspace(tmp_path: Path) -> Workspace:
    folder = tmp_path / "team"
    folder.mkdir(exist_ok=True)
    for name, text in (("ticker.py", TICKER), ("silent.py", SILENT), ("filler.py", FILLER)):
        (folder / name).write_text(text)
    return Workspace.objects.get_or_create(name="team", defaults={"path": str(folder)})[0]


def script(entry: str, *args: str, **spec) -> dict:
    return {"mode": "script", "script": {"workspace": "team", "entry": entry, "args": list(args)}, **spec}


def assert_ticks_complete(job_id: int, n: int) -> None:
    """Every ``tick i`` exactly once, and the stored seqs have no gap."""
    lines = [line for chunk in iter_all(job_id) for line in chunk]
    seqs = [line.seq for line in lines]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "the log has a gap"
    ticks = [line.text for line in lines if line.text.startswith("tick ")]
    assert ticks == [f"tick {i}" for i in range(n)], f"{len(ticks)} ticks, expected {n}"
