"""The runner's GPU paths through the real launch path, on a lent GPU machine (one call, ~4 minutes).

Each job spec is validated by ``workers.runner.config``, launched with the argv and environment
``workers.runner.launch`` builds for the executor (torchrun for several processes; CUDA_VISIBLE_DEVICES
as a GPU lease sets it), and judged by what a user sees: exit code, final metrics, the GPU
metrics in ``events.jsonl`` and the artifacts. Also lists the GPUs through NVML as the worker
registry does. Missing packages travel as wheels in ``.whl/`` (see docs/LLM.md).

    python3 bench/gpu_paths.py --out $OUT          # on the GPU machine; writes gpu_paths.json
    python3 bench/gpu_paths.py --device cpu        # dry run of the same flow on a CPU box
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workers.runner import launch  # noqa: E402
from workers.runner.config import parse_spec  # noqa: E402
from workers.runner.report import read_events  # noqa: E402


def cases(gpu: bool) -> list[tuple[str, dict]]:
    g = 1 if gpu else 0
    precision = "bf16" if gpu else "fp32"
    classify = {"data": {"dataset": "digits"}, "model": {"name": "cnn"}, "train": {"epochs": 2}}
    llm_tiny = {"mode": "llm", "llm": {"size": "tiny", "seq_len": 128, "precision": precision},
                "train": {"max_steps": 30, "lr": 0.001, "log_every_steps": 5}, "data": {"batch_size": 8}}
    return [
        ("centralized-cnn", {**classify, "mode": "centralized", "resources": {"gpus_per_node": g}}),
        ("ddp-nccl-1rank", {**classify, "mode": "ddp", "resources": {"procs_per_node": 1, "gpus_per_node": g}}),
        ("deepspeed-zero3-bf16", {**classify, "mode": "deepspeed", "resources": {"gpus_per_node": g},
                                  "deepspeed": {"zero_stage": 3, "precision": precision}}),
        ("llm-zero3-bf16", {**llm_tiny, "strategy": "deepspeed", "resources": {"gpus_per_node": g},
                            "deepspeed": {"zero_stage": 3, "precision": precision}}),
        ("llm-gpt2-lora-merge", {**llm_tiny, "resources": {"gpus_per_node": g},
                                 "llm": {**llm_tiny["llm"], "arch": "gpt2", "gradient_checkpointing": True,
                                         "lora": {"r": 8, "merge": True}}}),
    ]


def nvml_inventory() -> list[dict]:
    """trainhub/pools/gpus.py loaded alone (no Django needed): the worker registry's GPU list."""
    spec = importlib.util.spec_from_file_location("gpus", REPO / "trainhub" / "pools" / "gpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.inventory()


def run_case(name: str, raw: dict, work: Path, timeout: float) -> dict:
    spec = parse_spec({"name": name, **raw})
    run_dir = work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir / "job.yaml"
    config.write_text(yaml.safe_dump(spec.to_dict()))
    cmd = launch.argv(spec, config, run_dir)
    env = launch.env(spec, run_dir)
    if spec.resources.gpus_per_node:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(spec.resources.gpus_per_node))
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, cwd=launch.cwd(spec, run_dir), capture_output=True, text=True,
                              timeout=timeout)
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = "timeout", (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(
            errors="replace")
    events, _ = read_events(run_dir)
    metrics: dict = {}
    for event in events:
        if event.get("type") == "metrics":
            metrics.update(event.get("values", {}))
    return {"name": name, "exit": code, "seconds": round(time.monotonic() - started, 1),
            "argv0": " ".join(cmd[:4]), "final_metrics": metrics,
            "gpu_metrics": {k: v for k, v in metrics.items() if k.startswith("gpu_")},
            "artifacts": [e.get("path") for e in events if e.get("type") == "artifact"],
            "end": next((e for e in reversed(events) if e.get("type") == "end"), None),
            "tail": output.splitlines()[-40:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_paths"))
    parser.add_argument("--work", default="/tmp/gpu_paths_work")
    parser.add_argument("--budget", type=float, default=300, help="seconds for all cases together")
    parser.add_argument("--only", nargs="*", help="case names to run")
    ns = parser.parse_args()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": ns.device}
    try:
        import torch
        report["torch"] = torch.__version__
        report["cuda"] = torch.cuda.is_available() and torch.cuda.get_device_name(0)
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        report["torch"] = f"unavailable: {exc}"
    report["nvml_inventory"] = nvml_inventory()
    print("NVML:", report["nvml_inventory"], flush=True)
    deadline = time.monotonic() + ns.budget
    report["cases"] = []
    for name, raw in cases(ns.device == "cuda"):
        if ns.only and name not in ns.only:
            continue
        left = deadline - time.monotonic()
        if left < 20:
            report["cases"].append({"name": name, "exit": "skipped: out of time"})
            continue
        result = run_case(name, raw, Path(ns.work), timeout=left)
        report["cases"].append(result)
        print(f"== {name}: exit {result['exit']} in {result['seconds']}s gpu={result['gpu_metrics']} "
              f"final={ {k: v for k, v in result['final_metrics'].items() if not k.startswith('gpu_')} }",
              flush=True)
        if result["exit"] != 0:
            print("\n".join(result["tail"]), flush=True)
        (out / "gpu_paths.json").write_text(json.dumps(report, indent=1, default=str))
    ok = all(c.get("exit") == 0 for c in report["cases"])
    print("ALL OK" if ok else "SOME FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
