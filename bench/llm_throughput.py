"""LLM training throughput: tokens/s and model FLOPs utilisation (MFU).

Two ways to measure, both on the real LLM workload (bundled corpus repeated as data):

- ``--via runner`` (default): writes a job spec and runs it exactly as a worker would
  (``launch.argv``: ``python -m workers.runner`` or torchrun for ddp/deepspeed), then reads
  ``tokens_per_s`` from the run's events, skipping the first log window (compilation, warm-up).
- ``--via direct``: a minimal loop over the workload (forward, backward, AdamW), timed with
  device synchronisation; no checkpoints, evaluation or logging in the way.

MFU = tokens/s × training FLOPs per token / peak FLOP/s, with FLOPs per token counted for a
causal decoder, 6N + 6·L·d·T (half of PaLM's 12·L·d·T attention term; N without embedding
lookups: ``llm_model.flops_per_token``). Examples::

    python bench/llm_throughput.py --size small --seq-len 256 --batch 8 --steps 20 --via direct
    python bench/llm_throughput.py --size 1b --seq-len 2048 --batch 8 --steps 30 --compile \
        --device cuda --precision bf16 --strategy ddp --out result.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

H200_PEAK_TFLOPS = 989.0      # dense bf16, datasheet
H200_MEASURED_TFLOPS = 790.0  # 8192^3 bf16 matmul measured on this workplace's H200s


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--via", choices=("runner", "direct"), default="runner")
    p.add_argument("--arch", choices=("llama", "gpt2"), default="llama")
    p.add_argument("--size", default="small", help="tiny | small | 125m | 350m | 1b")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--grad-ckpt", action="store_true")
    p.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full training)")
    p.add_argument("--base-model", action="store_true",
                   help="fine-tune: first save a fresh model of --size as a local checkpoint")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--strategy", choices=("single", "ddp", "deepspeed"), default="single")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--zero-stage", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="per device; default: H200 datasheet on cuda, none on cpu")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--out", default=None, help="write the result as JSON here too")
    return p.parse_args()


def make_data(path: Path, tokens_needed: int) -> Path:
    """The bundled corpus repeated until it holds ``tokens_needed`` bytes (byte tokenizer)."""
    from workers.runner.workloads import llm_data

    text = "<|endoftext|>".join(llm_data.read_texts(llm_data.data_files(llm_data.DEMO_TEXT)))
    reps = tokens_needed // len(text.encode()) + 1
    path.write_text("\n".join([text] * reps), encoding="utf-8")
    return path


def spec_dict(a: argparse.Namespace, data_path: Path) -> dict:
    blocks = a.batch * a.nproc * (a.steps + 2)
    spec = {
        "name": f"bench-{a.arch}-{a.size}", "mode": "llm", "strategy": a.strategy,
        "resources": {"nodes": 1, "procs_per_node": a.nproc, "gpus_per_node": a.nproc if a.device == "cuda" else 0},
        # ~4 validation batches per rank: evaluation stays a small part of the run
        "data": {"path": str(data_path), "batch_size": a.batch,
                 "val_fraction": round(min(0.5, 4 * a.batch * a.nproc / (blocks + 4 * a.batch * a.nproc)), 4)},
        "train": {"epochs": 1, "max_steps": a.steps, "lr": 3e-4, "log_every_steps": a.log_every, "seed": 0},
        "checkpoint": {"resume": False},  # a benchmark never continues an earlier run
        "llm": {"arch": a.arch, "size": a.size, "seq_len": a.seq_len, "tokenizer": "byte",
                "precision": a.precision, "compile": a.compile, "gradient_checkpointing": a.grad_ckpt,
                "sample_tokens": 32},
    }
    if a.lora:
        spec["llm"]["lora"] = {"r": a.lora, "alpha": 2 * a.lora}
    if a.strategy == "deepspeed":
        spec["deepspeed"] = {"zero_stage": a.zero_stage, "precision": a.precision}
    return spec


def model_flops(spec) -> tuple[float, int]:
    """(training FLOPs per token, parameter count), from a model built on the meta device."""
    import torch

    from workers.runner.workloads import llm_data, llm_model

    # the bench's base model has the preset's shape, so the preset stands in for it
    llm = spec.llm.model_copy(update={"compile": False, "lora": None, "base_model": None})
    with torch.device("meta"):
        model = llm_model.create(llm, llm_data.byte_tokenizer())
    flops = llm_model.flops_per_token(model, llm.seq_len)
    if spec.llm.lora is not None:
        # frozen weights get no weight gradients: 4N instead of 6N (adapters are negligible)
        flops -= 2.0 * llm_model.count_params(model)[1]
    return flops, llm_model.count_params(model)[0]


def save_base(spec, work: Path) -> Path:
    """A freshly initialised model saved with save_pretrained, to fine-tune from."""
    from workers.runner.workloads.llm import LLMWorkload

    wl = LLMWorkload(spec.model_copy(update={"llm": spec.llm.model_copy(update={"compile": False})}), work)
    out = work / "base-model"
    wl.model().save_pretrained(out)
    wl.tokenizer.save_pretrained(out)
    return out


def check_merged(run_dir: Path) -> dict:
    """Load ``merged/`` without peft and run it once: the standalone model works."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "merged", local_files_only=True)
    lora = [n for n, _ in model.named_parameters() if "lora" in n]
    with torch.no_grad():
        logits = model(input_ids=torch.arange(16).view(1, 16)).logits
    return {"merged_loads_without_peft": not lora and bool(torch.isfinite(logits).all())}


def via_runner(a, spec, run_dir: Path) -> dict:
    from workers.runner import launch

    config = run_dir.parent / "job.json"
    config.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    cmd = launch.argv(spec, config, run_dir)
    env = launch.env(spec, run_dir)
    print("$", " ".join(cmd), flush=True)
    started = time.time()
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), timeout=a.timeout)
    wall = time.time() - started
    from workers.runner.report import read_events

    events, _ = read_events(run_dir)
    rates = [e["values"]["tokens_per_s"] for e in events
             if e["type"] == "metrics" and "tokens_per_s" in e["values"]]
    final = [e["values"] for e in events if e["type"] == "metrics" and "eval_loss" in e["values"]]
    end = [e for e in events if e["type"] == "end"]
    if proc.returncode != 0 or not rates:
        raise SystemExit(f"runner exited {proc.returncode} with {len(rates)} throughput readings")
    steady = rates[1:] or rates
    extra = check_merged(run_dir) if spec.llm.lora is not None else {}
    return {**extra, "tokens_per_s": statistics.median(steady), "tokens_per_s_windows": rates,
            "eval_loss": final[-1]["eval_loss"] if final else None,
            "perplexity": final[-1]["perplexity"] if final else None,
            "loop_seconds": end[-1].get("seconds") if end else None, "wall_seconds": round(wall, 1)}


def via_direct(a, spec, run_dir: Path) -> dict:
    import torch

    from workers.runner.workloads.llm import LLMWorkload

    device = torch.device(a.device)
    wl = LLMWorkload(spec, run_dir)
    train, _ = wl.datasets()
    torch.manual_seed(0)
    model = wl.model().to(device)
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **fused)
    loader = torch.utils.data.DataLoader(train, batch_size=a.batch, shuffle=True, collate_fn=wl.collate)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warmup, times, tokens, it = 3, [], 0, iter(loader)
    for step in range(a.steps + warmup):
        batch = {k: v.to(device, non_blocking=True) for k, v in next(it).items()}
        sync()
        t0 = time.perf_counter()
        loss, units = wl.loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
            tokens = units
        if step % a.log_every == 0:
            print(f"step {step} loss {float(loss.detach()):.3f} {time.perf_counter() - t0:.3f}s", flush=True)
    step_s = statistics.median(times)
    out = {"tokens_per_s": tokens / step_s, "step_seconds_median": step_s, "final_loss": float(loss.detach())}
    if device.type == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def main() -> int:
    a = parse()
    from workers.runner.config import parse_spec

    work = Path(a.work_dir or tempfile.mkdtemp(prefix="llm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    need = a.batch * a.nproc * (a.steps + 8) * a.seq_len * 2
    data_path = make_data(work / "corpus.txt", need)
    raw = spec_dict(a, data_path)
    if a.base_model:
        raw["llm"]["base_model"] = str(save_base(parse_spec({**raw, "llm": {**raw["llm"], "lora": None}}), work))
    spec = parse_spec(raw)
    flops_tok, params = model_flops(spec)
    run_dir = work / f"run-{a.via}-{a.strategy}"
    run_dir.mkdir(parents=True, exist_ok=True)
    result = (via_runner if a.via == "runner" else via_direct)(a, spec, run_dir)
    world = a.nproc
    peak = a.peak_tflops or (H200_PEAK_TFLOPS if a.device == "cuda" else None)
    achieved = result["tokens_per_s"] * flops_tok / 1e12
    result.update(
        via=a.via, strategy=a.strategy, nproc=world, arch=a.arch, size=a.size, params=params,
        seq_len=a.seq_len, batch_per_rank=a.batch, precision=a.precision, compile=a.compile,
        grad_ckpt=a.grad_ckpt, lora=a.lora, base_model=a.base_model, device=a.device, flops_per_token=flops_tok,
        achieved_tflops_per_device=round(achieved / world, 1))
    if peak:
        result["mfu_vs_peak"] = round(achieved / world / peak, 4)
        result["peak_tflops"] = peak
        if a.device == "cuda":
            result["mfu_vs_measured_790"] = round(achieved / world / H200_MEASURED_TFLOPS, 4)
    if a.device == "cuda":
        import torch

        result["gpu"] = torch.cuda.get_device_name(0)
    text = json.dumps(result, indent=2)
    print(text, flush=True)
    if a.out:
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
