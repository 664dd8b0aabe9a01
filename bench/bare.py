"""The bare PyTorch training the benchmarks hold TrainHub against, written once.

``script(dataset, inputs, classes, ddp=...)`` is the text of a script run as
``python bare.py SAMPLES EPOCHS BATCH`` (under ``torchrun --nproc-per-node N`` with ``ddp=True``):
the runner's classify workload done by hand — the same arrays (``load_arrays``), the same
standardisation and 80/20 split, an MLP of two hidden layers of 128, AdamW at 1e-3, a
``DistributedSampler`` batch order, every rank evaluating the whole validation split after each
epoch (as the runner does), ``model.pt`` saved by rank 0. Only what a job differs in is a
parameter: the dataset, the input and output widths, and DDP (gloo) or one process.
"""
from __future__ import annotations

import textwrap

_HEAD = """
    import sys
    import numpy as np, torch, torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from workers.runner.workloads.classify import load_arrays
    samples, epochs, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
"""
_ONE_PROCESS = """
    rank, world = 0, 1
"""
_DDP = """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo"); rank, world = dist.get_rank(), dist.get_world_size()
"""
_BODY = """
    torch.manual_seed(0)
    x, y = load_arrays({dataset!r}, samples, 0)
    order = np.random.default_rng(0).permutation(len(x)); n_val = int(round(len(x) * 0.2))
    tr, va = order[n_val:], order[:n_val]
    mean, std = x[tr].mean(0), x[tr].std(0) + 1e-6; x = (x - mean) / std
    train = TensorDataset(torch.from_numpy(x[tr]), torch.from_numpy(y[tr]))
    val = TensorDataset(torch.from_numpy(x[va]), torch.from_numpy(y[va]))
    model = net = nn.Sequential(nn.Linear({inputs}, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, {classes}))
    {wrap}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=batch, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        with torch.no_grad():  # every rank evaluates the whole validation split, as the runner does
            acc = sum(int((model(a).argmax(-1) == b).sum()) for a, b in DataLoader(val, batch_size=batch)) / len(val)
        if rank == 0:
            print(f"epoch {{epoch + 1}} loss={{loss.item():.3f}} val_acc={{acc:.3f}}", flush=True)
    if rank == 0:
        torch.save(net.state_dict(), "model.pt")
"""
_DDP_END = """
    dist.destroy_process_group()
"""


def script(dataset: str, inputs: int, classes: int, *, ddp: bool = False) -> str:
    """The bare training script for ``dataset`` (``inputs`` features, ``classes`` classes)."""
    body = _BODY.format(dataset=dataset, inputs=inputs, classes=classes, wrap="model = DDP(net)" if ddp else "")
    return textwrap.dedent(_HEAD) + textwrap.dedent(_DDP if ddp else _ONE_PROCESS) + textwrap.dedent(body) + (
        textwrap.dedent(_DDP_END) if ddp else "")


#: 20 features, 4 classes: the synthetic data of runner_overhead.py and dashboard_overhead.py
SYNTHETIC = script("synthetic", 20, 4)
SYNTHETIC_DDP = script("synthetic", 20, 4, ddp=True)
#: sklearn's digits (8×8 images, 10 classes), the default form's job; SAMPLES is ignored (pass 0)
DIGITS = script("digits", 64, 10)
