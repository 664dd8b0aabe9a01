"""GPU inventory of this host: NVML (nvidia-ml-py) when GPUs exist, or declared with TRAINHUB_FAKE_GPUS=N."""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def inventory() -> list[dict]:
    """One dict per GPU: index, name, memory_gb (and ``fake: True`` for declared ones)."""
    fake = os.environ.get("TRAINHUB_FAKE_GPUS", "").strip()
    if fake:
        if not fake.isdigit():
            raise ValueError(f"TRAINHUB_FAKE_GPUS={fake!r} must be a whole number of GPUs, e.g. 4")
        return [{"index": i, "name": "declared (TRAINHUB_FAKE_GPUS)", "memory_gb": 0, "fake": True}
                for i in range(int(fake))]
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver: a CPU machine
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                        "memory_gb": round(mem / 2**30, 1)})
        return out
    except pynvml.NVMLError:
        log.warning("NVML failed while listing GPUs; offering none", exc_info=True)
        return []
    finally:
        pynvml.nvmlShutdown()
