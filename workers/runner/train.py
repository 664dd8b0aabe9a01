"""The training loop: ``Runner(args, device, dataset, model).run()``.

Read it top to bottom: build loaders and the strategy, resume if a checkpoint exists, then
for each optimizer step run ``grad_accum_steps`` micro-batches (gradient sync skipped on
all but the last), step, log, evaluate, checkpoint, and stop early on SIGTERM. Only the
main rank prints and writes events; every rank takes part in evaluation and checkpoints
(DeepSpeed shards need all of them).
"""
from __future__ import annotations

import contextlib
import itertools
import math
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from workers.runner import checkpoint, signals
from workers.runner.arguments import Arguments
from workers.runner.errors import SpecError
from workers.runner.data import Datasets
from workers.runner import fence
from workers.runner.report import Reporter
from workers.runner import strategies

#: training time between two agreed stop checks of a multi-rank run (well inside the kill grace)
STOP_CHECK_SECONDS = 0.5
STOP_CHECK_MAX_STEPS = 1000
_NO_CONTEXT = contextlib.nullcontext()  # reusable: one object, not one a step


class Interrupted(Exception):
    """SIGTERM/SIGINT stopped the run after (if it could) writing a checkpoint."""


class Runner:
    def __init__(self, args: Arguments, device: torch.device, dataset: Datasets, model: torch.nn.Module):
        self.args, self.spec, self.device = args, args.spec, device
        self.workload = args.workload
        self.strategy = strategies.for_spec(self.spec)(self.spec, device, args.run_dir)
        self.is_main = self.strategy.is_main
        self.reporter = Reporter(args.run_dir, enabled=self.is_main)
        data, train = self.spec.data, self.spec.train
        s = self.strategy
        self.sampler = ResumableSampler(dataset.train, *s.data_shard(), train.seed, data.batch_size)
        self.train_loader = DataLoader(dataset.train, batch_size=data.batch_size, sampler=self.sampler,
                                       collate_fn=dataset.collate, num_workers=data.num_workers)
        self.val_loader = DataLoader(dataset.val, batch_size=data.batch_size, shuffle=False,
                                     collate_fn=dataset.collate, num_workers=data.num_workers)
        batches = math.ceil(self.sampler.num_samples / data.batch_size)
        self.steps_per_epoch = batches // train.grad_accum_steps
        if self.steps_per_epoch == 0:
            raise ValueError(f"data.batch_size × train.grad_accum_steps ({data.batch_size * train.grad_accum_steps}) "
                             f"is more than one rank's share of the training set ({self.sampler.num_samples} rows); "
                             "lower them or use fewer ranks")
        self.micro_per_epoch = self.steps_per_epoch * train.grad_accum_steps
        self.total_steps = self.steps_per_epoch * train.epochs
        if train.max_steps:
            self.total_steps = min(self.total_steps, train.max_steps)
        self.model = s.setup(model, self._optimizer, self._scheduler)
        self.step = self.epoch = self.micro = 0
        self.saved_step = -1
        self.last_metrics: dict[str, float] = {}
        self.stop_check = (0, 0, time.monotonic())  # next step to check, last checked step, when

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> dict[str, float]:
        """Train to the end (or SIGTERM); returns the last evaluation metrics."""
        status, reason, started = "failed", "", time.time()
        try:
            self._train()
            status = "succeeded"
            return self.last_metrics
        except Interrupted as exc:
            status, reason = "interrupted", str(exc)
            raise
        except BaseException as exc:
            reason = f"{type(exc).__name__}: {exc}"
            exc.trainhub_reported = True  # type: ignore[attr-defined]  # __main__ writes no second end
            raise
        finally:
            self.reporter.emit("end", status=status, reason=reason, step=self.step,
                               seconds=round(time.time() - started, 3))
            self.reporter.close()
            self.strategy.teardown()
            self.model = None  # the engine: runner.teardown can then free the process groups

    def _train(self) -> None:
        spec, s, wl = self.spec, self.strategy, self.workload
        resumed_path = self._resume()
        resumed = self.step if resumed_path else None
        self.reporter.emit("start", world_size=s.world_size, total_steps=self.total_steps, strategy=s.name,
                           epochs=spec.train.epochs, steps_per_epoch=self.steps_per_epoch,
                           resumed_from=resumed, unit=wl.unit)
        if resumed_path:
            self.reporter.emit("resume", step=self.step, path=resumed_path)
        self.log(f"{spec.name}: mode {spec.mode}, strategy {s.name}, {s.world_size} rank(s), "
                 f"{self.total_steps} steps ({self.steps_per_epoch}/epoch)"
                 + (f", resumed at step {resumed}" if resumed is not None else ""))
        print(f"rank {s.rank}/{s.world_size} ready on {self.device}: {self.sampler.num_samples} training "
              f"{'rows' if wl.unit == 'samples' else 'examples'} per epoch", flush=True)
        if self._stop_requested():  # a SIGTERM during start-up: nothing new to save
            raise Interrupted(signals.reason())
        self.model.train()
        window = Window()
        while self.step < self.total_steps and self.epoch < spec.train.epochs:
            self.sampler.set_epoch(self.epoch, skip_batches=self.micro)
            batches = itertools.islice(self.train_loader, self.micro_per_epoch - self.micro)
            for batch in batches:
                boundary = (self.micro + 1) % spec.train.grad_accum_steps == 0
                batch = to_device(batch, self.device, s.input_dtype)
                with _NO_CONTEXT if boundary else s.no_sync():
                    loss, units = wl.loss(self.model, batch)
                    s.backward(loss)
                window.add(loss.detach(), units)
                self.micro += 1
                if boundary:
                    self._after_step(s.step(), window)
                    if self.step >= self.total_steps or self.micro == 0:
                        break
        if self.step > self.saved_step:
            self._checkpoint()
        self.reporter.flush()
        with s.full_params():
            fence.check(self.args.run_dir)
            for artifact in wl.finish(s.raw_model, self.is_main):
                self.reporter.emit("artifact", **artifact)
                self.log(f"wrote {artifact['path']}")

    def _after_step(self, grad_norm: float | None, window: "Window") -> None:
        spec = self.spec
        self.step = self.strategy.aligned_step(self.step + 1)
        epoch_done = self.micro >= self.micro_per_epoch
        last = self.step >= self.total_steps
        values: dict[str, float] = {}
        if self.step % spec.train.log_every_steps == 0 or epoch_done or last:
            values = self._train_values(window, grad_norm)
        eval_every = spec.train.eval_every_steps
        if (eval_every and self.step % eval_every == 0) or (not eval_every and epoch_done) or last:
            values.update(self._evaluate())
        values.update(self.strategy.take_metrics())
        if values:
            shown = " ".join(f"{k}={v:.0f}" if abs(v) >= 1000 else f"{k}={v:.4g}" for k, v in values.items())
            # printed by the reporter with the window's events (held with them, see Reporter): main rank only
            self.reporter.window(self.step, self.total_steps, self.epoch, values,
                                 line=f"epoch {self.epoch + 1}/{spec.train.epochs} step {self.step}/{self.total_steps} "
                                      f"{shown}")
        if epoch_done:
            self.epoch, self.micro = self.epoch + 1, 0
        every = spec.checkpoint.every_steps
        if every and self.step % every == 0:
            self._checkpoint()
        if self._stop_requested():
            if self.step > self.saved_step:
                self._checkpoint()
            raise Interrupted(signals.reason())

    # -- pieces ---------------------------------------------------------------------------
    def _train_values(self, window: "Window", grad_norm: float | None) -> dict[str, float]:
        extra = self.workload.train_metrics()
        keys = list(extra)
        loss, rate, *rest = self.strategy.all_reduce([window.mean_loss(), window.rate()] + [extra[k] for k in keys])
        rate *= self.strategy.world_size  # every rank's throughput, summed
        values = {"train_loss": loss, **dict(zip(keys, rest)), "lr": self.strategy.lr,
                  f"{self.workload.unit}_per_s": rate}
        if grad_norm is not None:
            values["grad_norm"] = grad_norm
        values.update(gpu_values(self.device))
        window.reset()
        return values

    def _evaluate(self) -> dict[str, float]:
        self.reporter.flush()  # held windows go out before what may take a while
        self.model.eval()
        batches = (to_device(b, self.device, self.strategy.input_dtype) for b in self.val_loader)
        metrics = self.workload.evaluate(self.model, batches)
        self.model.train()
        self.last_metrics = metrics
        return metrics

    def _checkpoint(self) -> None:
        self.reporter.flush()
        state = {"step": self.step, "epoch": self.epoch, "micro": self.micro}
        path = checkpoint.save(self.strategy, self.args.run_dir, self.step, state, self.spec,
                               self.spec.checkpoint.keep_last)
        self.saved_step = self.step
        rel = str(path.relative_to(self.args.run_dir))
        self.reporter.emit("checkpoint", step=self.step, path=rel)
        self.log(f"checkpoint {rel}")

    def _resume(self) -> str | None:
        """Load the newest checkpoint if there is one; returns its path relative to the run dir."""
        if not self.spec.checkpoint.resume:
            return None
        path = checkpoint.latest(self.args.run_dir)
        start_from = self.spec.checkpoint.start_from
        if path is None:
            if start_from:  # a worker copies it in before the start; the bare runner cannot reach it
                self.log(f"checkpoint.start_from ({start_from}) is ignored here: only a TrainHub worker copies "
                         "that checkpoint in; to start from it, copy it into "
                         f"{self.args.run_dir / 'checkpoints'}/ first. Starting from scratch.")
            return None
        state = checkpoint.load(self.strategy, path)
        self.step, self.epoch, self.micro = state["step"], state["epoch"], state["micro"]
        if start_from and path.name == start_from.rsplit("/", 1)[-1] and self.step >= self.total_steps:
            raise SpecError({"checkpoint.start_from": (
                f"{start_from} is at step {self.step} but this run has {self.total_steps} steps, so nothing is "
                f"left to train; raise train.epochs (or train.max_steps) so the run goes past step {self.step}")})
        self.saved_step = self.step
        return str(path.relative_to(self.args.run_dir))

    def _stop_requested(self) -> bool:
        """Whether any rank was asked to stop (SIGTERM/SIGINT). Ranks must agree — a rank that
        stopped alone would leave the others waiting in a collective — so with several ranks it
        is a collective: not at every step (a collective and, on a GPU, a device sync each), but
        every k steps, with k agreed at each check so that checks come about every
        ``STOP_CHECK_SECONDS`` of training."""
        if self.strategy.world_size == 1:
            return signals.requested()
        due, last_step, last_time = self.stop_check
        if self.step < due:
            return False
        now = time.monotonic()
        per_step = (now - last_time) / max(1, self.step - last_step)
        wanted = max(1, min(STOP_CHECK_MAX_STEPS, int(STOP_CHECK_SECONDS / max(per_step, 1e-6))))
        # one MAX reduction: any rank's stop flag, and the smallest k any rank wants (as -k)
        flag, neg_k = self.strategy.all_reduce([1.0 if signals.requested() else 0.0, -float(wanted)], op="max")
        self.stop_check = (self.step + int(-neg_k), self.step, now)
        return flag > 0

    def _optimizer(self, params) -> torch.optim.Optimizer:
        t = self.spec.train
        if t.optimizer == "sgd":
            return torch.optim.SGD(params, lr=t.lr, momentum=0.9, weight_decay=t.weight_decay)
        cls = torch.optim.Adam if t.optimizer == "adam" else torch.optim.AdamW
        params = list(params)
        # The fused kernel (CUDA tensors only) does the whole step in one launch; what it gains end to end
        # on the H200 is not measured yet (docs/BENCHMARKS.md, "LLM on H200").
        tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
        fused = bool(tensors) and all(p.is_cuda for p in tensors)
        return cls(params, lr=t.lr, weight_decay=t.weight_decay, fused=fused or None)

    def _scheduler(self, optimizer) -> torch.optim.lr_scheduler.LambdaLR:
        return Scheduler(optimizer, LRSchedule(self.spec.train, self.total_steps))

    def log(self, line: str) -> None:
        if self.is_main:
            print(line, flush=True)


class LRSchedule:
    """Linear warmup, then constant, cosine or linear decay to zero over the run."""

    def __init__(self, train, total_steps: int):
        self.kind, self.warmup, self.total = train.scheduler, train.warmup_steps, max(1, total_steps)

    def steady_from(self) -> int | None:
        """The step from which the factor stays the same (None: it changes to the end of the run)."""
        return self.warmup if self.kind == "constant" else None

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        if self.kind == "cosine":
            return 0.5 * (1 + math.cos(math.pi * progress))
        if self.kind == "linear":
            return 1.0 - progress
        return 1.0


class Scheduler(torch.optim.lr_scheduler.LambdaLR):
    """torch's ``LambdaLR`` (same state, same checkpoints) with a lighter ``step()``: torch's goes through
    its order checks, a context manager and ``get_lr()``'s own checks every step, ~2x the cost of setting
    the rates. The first step, a step to a given epoch and tensor learning rates still take torch's path.
    Once a schedule's factor no longer changes (a constant one after its warm-up), a step only counts."""

    def __init__(self, optimizer, lr_lambda: "LRSchedule"):
        self._steady_from = lr_lambda.steady_from()
        super().__init__(optimizer, lr_lambda)

    def step(self, epoch: int | None = None) -> None:
        if epoch is not None or self._step_count <= 1 or not isinstance(self.base_lrs[0], float):
            super().step(epoch)
            return
        self._step_count += 1
        self.last_epoch += 1
        if self._steady_from is not None and self.last_epoch > self._steady_from:
            return  # the rates set at the steady step stay as they are
        self._last_lr = [base * factor(self.last_epoch) for factor, base in zip(self.lr_lambdas, self.base_lrs)]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def state_dict(self) -> dict:
        state = super().state_dict()
        state.pop("_steady_from", None)  # derived from the schedule: checkpoints stay torch's LambdaLR state
        return state


class ResumableSampler(DistributedSampler):
    """This rank's shuffled share of an epoch (seeded by seed + epoch), able to start mid-epoch."""

    def __init__(self, dataset, world_size: int, rank: int, seed: int, batch_size: int):
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.batch_size, self.skip = batch_size, 0

    def set_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip = skip_batches * self.batch_size

    def __iter__(self):
        return itertools.islice(super().__iter__(), self.skip, None)

    def __len__(self) -> int:
        return max(0, self.num_samples - self.skip)


class Window:
    """Loss and throughput since the last log line. Each micro-batch's loss is kept as a tensor and the
    window's losses are summed when it is logged, in one operation: a micro-batch costs a list append, not a
    tensor addition, and a GPU is not synchronised every micro-batch (issue #12: per window, not per step)."""

    #: losses kept before they are summed into one (a window of many steps holds no more than this)
    FOLD = 1024

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.losses: list[torch.Tensor] = []
        self.folded: torch.Tensor | None = None
        self.n, self.units, self.started = 0, 0, time.perf_counter()

    def add(self, loss: torch.Tensor, units: int) -> None:
        """``loss``: one micro-batch's, detached."""
        self.losses.append(loss)
        self.n, self.units = self.n + 1, self.units + units
        if len(self.losses) >= self.FOLD:
            self.folded, self.losses = self._total(), []

    def _total(self) -> torch.Tensor | float:
        if not self.losses:
            return 0.0 if self.folded is None else self.folded
        total = torch.stack(self.losses).sum(dtype=torch.float32)
        return total if self.folded is None else self.folded + total

    def mean_loss(self) -> float:
        return float(self._total()) / max(1, self.n)

    def rate(self) -> float:
        return self.units / max(1e-9, time.perf_counter() - self.started)


def to_device(batch: Any, device: torch.device, float_dtype: torch.dtype = torch.float32) -> Any:
    """Move tensors (in tuples, lists, dicts) to ``device``; floating ones become ``float_dtype``."""
    if isinstance(batch, torch.Tensor):
        # A CPU run's batches are already where they go: skip the dispatch of a .to() that returns its input.
        if not (batch.is_cpu and device.type == "cpu"):
            batch = batch.to(device, non_blocking=True)
        return batch.to(float_dtype) if batch.dtype != float_dtype and batch.is_floating_point() else batch
    if isinstance(batch, dict):
        return {k: to_device(v, device, float_dtype) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)([to_device(v, device, float_dtype) for v in batch])
    return batch


def gpu_values(device: torch.device) -> dict[str, float]:
    """This rank's GPU memory (GiB, peak since the last report) and utilisation (%), on CUDA only."""
    if device.type != "cuda":
        return {}
    values = {"gpu_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30}
    torch.cuda.reset_peak_memory_stats(device)
    try:
        values["gpu_util_pct"] = float(torch.cuda.utilization(device))  # needs NVML (nvidia-ml-py)
    except Exception:  # no NVML on this host: memory alone
        pass
    return values
