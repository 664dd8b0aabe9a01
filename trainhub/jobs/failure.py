"""What went wrong in a failed job, read from the end of its log: the line a person needs first.

"exited with code 1" says nothing; the exception at the end of the traceback, an out-of-memory
message or the signal that killed the process does. The job page's status card shows it with
links to that line and to the log's first error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from trainhub.jobs import logs
from trainhub.jobs.models import Job, Status

TAIL = 400  # lines from the end of the log looked at: a traceback's last line is near the end
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure))\b(?::|$)")
_OOM = ("out of memory", "outofmemoryerror", "memoryerror", "oom-kill", "oom_kill")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


@dataclass
class Failure:
    kind: str  # "oom", "exception", "signal" or "exit"
    text: str  # the line itself (or the exit description)
    seq: int | None = None  # where it is in the log
    where: str = ""  # the innermost frame of its traceback: "train.py:42 in step"
    hint: str = ""


def _signal_hint(error: str) -> str:
    if "SIGKILL" in error:
        return ("SIGKILL usually means the kernel's out-of-memory killer or a hard kill: "
                "lower batch_size or model size, or ask for a machine with more memory")
    if "SIGSEGV" in error or "SIGBUS" in error:
        return "a crash inside native code (CUDA, a C extension); the lines just before it may say where"
    return ""


def failure_of(job: Job) -> Failure | None:
    """The most telling error of a failed job, or None for any other status."""
    if job.status != Status.FAILED:
        return None
    lines = logs.tail_lines(job.pk, TAIL)
    frame = ""
    found: Failure | None = None
    for line in lines:
        text = line.text.strip()
        lower = text.lower()
        match = _FRAME.match(line.text)
        if match:
            frame = f"{match.group(1).rsplit('/', 1)[-1]}:{match.group(2)} in {match.group(3)}"
            continue
        if any(marker in lower for marker in _OOM):
            found = Failure("oom", text[:500], line.seq, frame,
                            "out of memory: lower data.batch_size (or the model size), or use more GPUs")
        elif _EXCEPTION.match(text) and not (found and found.kind == "oom"):
            found = Failure("exception", text[:500], line.seq, frame)
    if found is not None:
        return found
    if "killed by" in job.error:
        return Failure("signal", job.error, None, "", _signal_hint(job.error))
    return None
