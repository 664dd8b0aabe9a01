"""LLM jobs end to end through the runner's command line, as a worker launches them."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
import yaml

from workers.runner import launch
from workers.runner.config import load_file
from workers.runner.report import read_events

pytestmark = pytest.mark.slow  # every test starts runner processes

WORDS = "the cat sat on a mat and the dog ran to the park with a ball while a bird sang".split()


def write_job(tmp_path, **overrides):
    rng = random.Random(0)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(10)) + "." for _ in range(800)))
    spec = {"name": "tiny-llm", "mode": "llm",
            "data": {"path": str(text), "batch_size": 8},
            "train": {"epochs": 1, "max_steps": 12, "lr": 0.003, "log_every_steps": 4},
            "llm": {"seq_len": 32, "sample_prompt": "the dog", "sample_tokens": 16}}
    for section, values in overrides.items():
        spec[section] = {**spec.get(section, {}), **values} if isinstance(values, dict) else values
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def launch_job(config, run_dir, timeout=180):
    spec = load_file(config)
    run_dir.mkdir(parents=True, exist_ok=True)  # the executor's job: the run dir is the cwd
    cmd = launch.argv(spec, config, run_dir)
    return subprocess.run(cmd, env=launch.env(spec, run_dir), cwd=launch.cwd(spec, run_dir),
                          capture_output=True, text=True, timeout=timeout)


def test_an_llm_job_trains_evaluates_and_saves_its_model_through_the_cli(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir = tmp_path / "run"
    proc = launch_job(write_job(tmp_path), run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events, _ = read_events(run_dir)
    metrics = {k: v for e in events if e["type"] == "metrics" for k, v in e["values"].items()}
    assert {"train_loss", "tokens_per_s", "eval_loss", "perplexity"} <= set(metrics)
    assert {e["name"] for e in events if e["type"] == "artifact"} >= {"model", "sample"}
    assert events[-1] == {**events[-1], "type": "end", "status": "succeeded"}
    assert (run_dir / "sample.txt").read_text().startswith("the dog")
    assert "sample: 'the dog" in proc.stdout
    model = AutoModelForCausalLM.from_pretrained(run_dir / "model", local_files_only=True)
    tok = AutoTokenizer.from_pretrained(run_dir / "model", local_files_only=True)
    ids = tok("the cat sat", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape[-1] >= len(tok)


def test_a_lora_completion_only_job_writes_a_merged_model_through_the_cli(tmp_path):
    from transformers import AutoModelForCausalLM

    from workers.runner.workloads.llm import LLMWorkload

    base = tmp_path / "base"
    fresh = LLMWorkload(load_file(write_job(tmp_path)), tmp_path)
    fresh.model().save_pretrained(base)
    fresh.tokenizer.save_pretrained(base)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"prompt": f"Add {a} {b}:", "response": f" {a + b}"})
                               for a in range(6) for b in range(6)))
    config = write_job(tmp_path, data={"path": str(pairs)}, train={"max_steps": 6},
                       llm={"base_model": str(base), "completion_only": True,
                            "lora": {"r": 4, "alpha": 8}, "sample_prompt": "Add 1 2:"})
    run_dir = tmp_path / "run"
    proc = launch_job(config, run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    artifacts = {e["name"] for e in read_events(run_dir)[0] if e["type"] == "artifact"}
    assert {"adapter", "merged", "sample"} <= artifacts
    merged = AutoModelForCausalLM.from_pretrained(run_dir / "merged", local_files_only=True)
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_a_missing_data_path_is_refused_by_field_with_exit_code_2(tmp_path):
    config = write_job(tmp_path, data={"path": str(tmp_path / "nowhere.txt")})
    proc = subprocess.run([sys.executable, "-m", "workers.runner", "--config", str(config),
                           "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120,
                          env=launch.env(load_file(config)))
    assert proc.returncode == 2
    assert "spec error: data.path:" in proc.stderr


@pytest.mark.timeout(300)
def test_an_llm_job_runs_under_two_rank_ddp(tmp_path):
    config = write_job(tmp_path, strategy="ddp", resources={"procs_per_node": 2},
                       train={"max_steps": 6, "log_every_steps": 3})
    run_dir = tmp_path / "run"
    proc = launch_job(config, run_dir, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events, _ = read_events(run_dir)
    start = next(e for e in events if e["type"] == "start")
    assert start["world_size"] == 2 and start["strategy"] == "ddp"
    assert any("eval_loss" in e.get("values", {}) for e in events)
    assert (run_dir / "model" / "config.json").is_file() and (run_dir / "sample.txt").is_file()
    assert "[rank1]:" in proc.stdout + proc.stderr


def test_a_bpe_job_resumes_with_the_tokenizer_it_trained(tmp_path):
    run_dir = tmp_path / "run"
    first = launch_job(write_job(tmp_path, train={"max_steps": 4},
                                 llm={"tokenizer": "bpe", "vocab_size": 300}), run_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    vocab = (run_dir / "tokenizer" / "tokenizer.json").read_text()
    again = launch_job(write_job(tmp_path, train={"max_steps": 8},
                                 llm={"tokenizer": "bpe", "vocab_size": 300}), run_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    events, _ = read_events(run_dir)
    assert any(e["type"] == "resume" and e["step"] == 4 for e in events)
    assert events[-1]["status"] == "succeeded" and events[-1]["step"] == 8
    assert (run_dir / "tokenizer" / "tokenizer.json").read_text() == vocab


@pytest.mark.timeout(300)
def test_an_llm_job_runs_under_deepspeed(tmp_path):
    pytest.importorskip("deepspeed")
    config = write_job(tmp_path, strategy="deepspeed", deepspeed={"zero_stage": 2},
                       train={"max_steps": 4})
    run_dir = tmp_path / "run"
    proc = launch_job(config, run_dir, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    events, _ = read_events(run_dir)
    assert next(e for e in events if e["type"] == "start")["strategy"] == "deepspeed"
    assert any("perplexity" in e.get("values", {}) for e in events)
    assert (run_dir / "model" / "config.json").is_file()
