"""``runner.init`` and ``runner.teardown``: what happens before and after any training."""
from __future__ import annotations

import os
import random
import socket
from pathlib import Path

from workers.runner import signals
from workers.runner.arguments import Arguments
from workers.runner.config import dump_yaml

RESOLVED_CONFIG = "config.resolved.yaml"


def default_extensions_dir() -> str:
    """Where DeepSpeed's JIT-compiled C++ ops are cached (the first build takes about a minute)."""
    return str(Path.home() / ".cache" / "trainhub" / "torch_extensions")


def init(args: Arguments) -> Arguments:
    """Seed every RNG, create the run directory, install the SIGTERM handler and, for ddp and
    deepspeed, join the process group (one-process runs get a local rendezvous of their own)."""
    import numpy as np
    import torch

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", default_extensions_dir())
    args.run_dir.mkdir(parents=True, exist_ok=True)
    if args.is_main:
        write_atomic(args.run_dir / RESOLVED_CONFIG, dump_yaml(args.spec))
    seed = args.spec.train.seed
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    signals.install()
    if args.spec.strategy_name != "single":
        _single_process_rendezvous()
        from workers.runner.strategies import STRATEGIES

        STRATEGIES[args.spec.strategy_name].init_distributed(args)
        args.rank = int(os.environ["RANK"])
        args.local_rank = int(os.environ["LOCAL_RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
    return args


def teardown(args: Arguments | None = None) -> None:
    """Leave the process group; safe to call when there is none.

    Call it after the ``Runner`` (and the model given to it) are dropped. A gloo/nccl group ends
    its threads only when its last reference goes; one kept alive (a ZeRO-3 engine's cycles, a
    parameter's ``ds_process_group``) still runs its threads at interpreter exit, where a rank
    can abort ("terminate called without an active exception"). So for a strategy whose objects
    hold the groups in cycles (``Strategy.collect_before_leaving``: DeepSpeed) the garbage is
    collected first — a full collection over torch's objects, 0.25–0.4 s a rank, which a DDP run
    does not need — and the strategy leaves the group its own way (DeepSpeed through
    ``deepspeed.comm``).
    """
    import gc

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    from workers.runner.strategies import STRATEGIES

    strategy = (STRATEGIES.get(args.spec.strategy_name) if args is not None else None) or STRATEGIES["single"]
    if strategy.collect_before_leaving or args is None:
        gc.collect()
    strategy.destroy_distributed()


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _single_process_rendezvous() -> None:
    """Without a launcher, a ddp/deepspeed run is one rank on a free local port."""
    if "RANK" in os.environ:
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
