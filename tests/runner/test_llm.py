"""The LLM workload on CPU with debug-size models: direct calls through the Workload API."""
from __future__ import annotations

import json
import os
import random

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from workers.runner.config import SpecError, parse_spec  # noqa: E402
from workers.runner.workloads.llm import LLMWorkload  # noqa: E402
from workers.runner.workloads.llm_data import IGNORE  # noqa: E402

WORDS = ("the cat sat on a mat and the dog ran to the park with a ball while a bird "
         "sang in the tree near the river under the blue sky").split()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Debug-size models gain nothing from intra-op threads, and on a busy machine their
    # spin-waiting costs a lot.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def text_file(tmp_path):
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(10)) + "." for _ in range(1500)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture
def pairs_file(tmp_path):
    rows = [{"prompt": f"Add: {a} + {b} =", "response": f" {a + b}"} for a in range(8) for b in range(8)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return path


def workload(tmp_path, llm=None, data=None, **spec):
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    spec = parse_spec({"mode": "llm", "data": {"batch_size": 8, **(data or {})},
                       "llm": {"seq_len": 32, **(llm or {})}, **spec})
    return LLMWorkload(spec, run_dir)


def loader(w, dataset, shuffle=False, batch_size=8):
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=w.collate)


def train(w, model, steps, lr=3e-3):
    train_set, _ = w.datasets()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    done = 0
    while done < steps:
        for batch in loader(w, train_set, shuffle=True):
            loss, units = w.loss(model, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done == steps:
                break
    return units


def test_tiny_llama_pretraining_lowers_the_loss_and_reports_perplexity(tmp_path, text_file):
    w = workload(tmp_path, data={"path": str(text_file)})
    w.preflight()
    torch.manual_seed(0)
    model = w.model()
    assert 50_000 < sum(p.numel() for p in model.parameters()) < 1_000_000
    assert model.config._attn_implementation == "sdpa"
    val = list(loader(w, w.datasets()[1]))
    before = w.evaluate(model, val)
    units = train(w, model, 40)
    after = w.evaluate(model, val)
    assert units == 8 * 32 and w.unit == "tokens"
    assert after["eval_loss"] < before["eval_loss"] - 1.0
    assert after["perplexity"] == pytest.approx(torch.tensor(after["eval_loss"]).exp().item(), rel=1e-6)


def test_gpt2_arch_builds_and_takes_a_training_step(tmp_path, text_file):
    w = workload(tmp_path, llm={"arch": "gpt2"}, data={"path": str(text_file)})
    model = w.model()
    assert type(model).__name__ == "GPT2LMHeadModel"
    batch = next(iter(loader(w, w.datasets()[0])))
    loss, _ = w.loss(model, batch)
    loss.backward()
    assert torch.isfinite(loss)


def test_a_bpe_trained_locally_round_trips_text_and_is_kept_in_the_run_dir(tmp_path, text_file):
    w = workload(tmp_path, llm={"tokenizer": "bpe", "vocab_size": 300}, data={"path": str(text_file)})
    tok = w.tokenizer
    text = "the cat sat on the mat, near a café — naïve 🦙!\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(tok) <= 300
    assert len(tok("the cat sat on the mat")["input_ids"]) < len("the cat sat on the mat")  # merges learned
    again = LLMWorkload(w.spec, w.run_dir).tokenizer  # a resumed run loads the saved one
    assert again.get_vocab() == tok.get_vocab()
    assert (w.run_dir / "tokenizer" / "tokenizer.json").is_file()


def test_the_byte_tokenizer_round_trips_any_text(tmp_path):
    tok = workload(tmp_path).tokenizer
    text = "Grüße, 世界 🌍\ttabs\r\n<|endoftext|>"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tok) == 258
    from workers.runner.workloads.llm_data import encode

    assert encode(tok, text * 3) == tok(text * 3, add_special_tokens=False)["input_ids"]  # the fast path agrees


def test_completion_only_masks_the_prompt_tokens(tmp_path, pairs_file):
    w = workload(tmp_path, llm={"completion_only": True}, data={"path": str(pairs_file)})
    w.preflight()
    train_set, val_set = w.datasets()
    assert len(train_set) + len(val_set) == 64 and len(val_set) >= 1
    tok = w.tokenizer
    row = train_set[0]
    n_prompt = len(tok("Add: 0 + 0 =", add_special_tokens=False)["input_ids"])
    assert (row["labels"][:n_prompt] == IGNORE).all()
    assert tok.decode(row["labels"][n_prompt:].tolist()) == " 0<|endoftext|>"
    batch = next(iter(loader(w, train_set, batch_size=len(train_set))))  # one- and two-digit sums
    pad = batch["attention_mask"] == 0
    assert pad.any()
    assert (batch["labels"][pad] == IGNORE).all()
    loss, units = w.loss(w.model(), batch)
    assert torch.isfinite(loss) and units == int(batch["attention_mask"].sum())


def test_completion_only_refuses_plain_text_data(tmp_path, text_file):
    w = workload(tmp_path, llm={"completion_only": True}, data={"path": str(text_file)})
    with pytest.raises(SpecError) as err:
        w.preflight()
    assert "llm.completion_only" in err.value.errors


def test_lora_fine_tune_merges_into_a_standalone_model_with_the_same_logits(tmp_path, text_file):
    from transformers import AutoModelForCausalLM

    base_dir = tmp_path / "base"
    pre = workload(tmp_path, data={"path": str(text_file)})
    torch.manual_seed(0)
    pre.model().save_pretrained(base_dir)
    pre.tokenizer.save_pretrained(base_dir)

    w = workload(tmp_path, llm={"base_model": str(base_dir), "lora": {"r": 4, "alpha": 8}},
                 data={"path": str(text_file)})
    w.preflight()
    model = w.model()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in model.parameters()) / 5
    train(w, model, 15, lr=1e-2)
    model.eval()
    ids = torch.tensor([w.tokenizer("the dog ran to the park")["input_ids"]])
    with torch.no_grad():
        peft_logits = model(input_ids=ids).logits
    artifacts = {a["name"] for a in w.finish(model, is_main=True)}
    assert {"adapter", "merged", "sample"} <= artifacts
    merged = AutoModelForCausalLM.from_pretrained(w.run_dir / "merged", local_files_only=True)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        merged_logits = merged(input_ids=ids).logits
    torch.testing.assert_close(merged_logits, peft_logits, atol=1e-4, rtol=1e-4)
    base = AutoModelForCausalLM.from_pretrained(base_dir, local_files_only=True)
    with torch.no_grad():
        assert not torch.allclose(base(input_ids=ids).logits, merged_logits, atol=1e-4)


def test_finish_saves_a_reloadable_model_with_its_tokenizer_and_a_sample(tmp_path, text_file):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    w = workload(tmp_path, llm={"sample_prompt": "the cat", "sample_tokens": 12}, data={"path": str(text_file)})
    model = w.model()
    train(w, model, 5)
    artifacts = w.finish(model, is_main=True)
    assert {"name": "model", "path": "model"} in artifacts
    sample = (w.run_dir / "sample.txt").read_text(encoding="utf-8")
    assert sample.startswith("the cat")
    reloaded = AutoModelForCausalLM.from_pretrained(w.run_dir / "model", local_files_only=True)
    tok = AutoTokenizer.from_pretrained(w.run_dir / "model", local_files_only=True)
    assert tok.decode(tok("a mat")["input_ids"]) == "a mat"
    assert reloaded.config.vocab_size >= len(tok)
    assert workload(tmp_path).finish(model, is_main=False) == []


def test_missing_paths_are_refused_by_field_before_anything_runs(tmp_path):
    w = workload(tmp_path, llm={"base_model": str(tmp_path / "nope"), "tokenizer": str(tmp_path / "tok")},
                 data={"path": str(tmp_path / "missing.txt")})
    with pytest.raises(SpecError) as err:
        w.preflight()
    assert set(err.value.errors) == {"llm.base_model", "llm.tokenizer", "data.path"}
    assert "missing.txt" in err.value.errors["data.path"]


def test_an_impossible_shape_is_refused_by_field(tmp_path):
    with pytest.raises(SpecError) as err:
        workload(tmp_path, llm={"size": "custom", "d_model": 66, "n_layer": 1, "n_head": 4}).preflight()
    assert "llm.n_head" in err.value.errors
    with pytest.raises(SpecError) as err:
        workload(tmp_path, llm={"size": "custom"}).preflight()
    assert "llm.size" in err.value.errors


def test_deepspeed_precision_and_llm_precision_must_agree(tmp_path):
    w = workload(tmp_path, strategy="deepspeed", llm={"precision": "bf16"})
    with pytest.raises(SpecError) as err:
        w.preflight()
    assert "deepspeed.precision" in err.value.errors["llm.precision"]
    workload(tmp_path, strategy="deepspeed", llm={"precision": "bf16"},
             deepspeed={"precision": "bf16"}).preflight()


def test_the_bundled_corpus_is_the_default_demo_data(tmp_path):
    w = workload(tmp_path)
    w.preflight()
    train_set, val_set = w.datasets()
    assert len(train_set) > 100 and len(val_set) > 10
    pairs = workload(tmp_path, llm={"completion_only": True, "seq_len": 128})
    assert len(pairs.datasets()[0]) > 20


def test_bf16_and_gradient_checkpointing_train_on_cpu(tmp_path, text_file):
    w = workload(tmp_path, llm={"precision": "bf16", "gradient_checkpointing": True}, data={"path": str(text_file)})
    torch.manual_seed(0)
    model = w.model()
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    batch = next(iter(loader(w, w.datasets()[0])))
    loss, _ = w.loss(model, batch)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_size_presets_scale_up_to_a_billion_parameters():
    from workers.runner.workloads import llm_model

    def blocks(size):
        d = llm_model.PRESETS[size]
        head = d["d_model"] // d["n_head"]
        attn = 2 * d["d_model"] ** 2 + 2 * d["d_model"] * head * d["n_kv_head"]
        return d["n_layer"] * (attn + 3 * d["d_model"] * d["ffn"])

    assert blocks("tiny") < 1e6
    assert 70e6 < blocks("125m") < 130e6
    assert 250e6 < blocks("350m") < 360e6
    assert 0.9e9 < blocks("1b") < 1.2e9


def test_lora_trains_its_adapters_with_gradient_checkpointing(tmp_path, text_file):
    w = workload(tmp_path, llm={"lora": {"r": 2, "alpha": 4}, "gradient_checkpointing": True},
                 data={"path": str(text_file)})
    model = w.model()
    model.train()
    loss, _ = w.loss(model, next(iter(loader(w, w.datasets()[0]))))
    loss.backward()
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert lora and all(p.grad is not None for p in lora)
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)
