"""Causal language modelling as a workload: pretraining from a config, fine-tuning a local
checkpoint, LoRA (with a merged standalone model at the end), completion-only loss.

It runs under any strategy (single, ddp, deepspeed): the training loop only calls the
``Workload`` methods. Everything is offline: models are built from configs or loaded from
local directories, tokenizers are byte-level, trained here, or loaded from a local folder.
"""
from __future__ import annotations

import contextlib
import math
import os
from functools import cached_property
from pathlib import Path

import torch

# Nothing here may reach the Hugging Face Hub; set before transformers is first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from workers.runner.config import SpecError  # noqa: E402
from workers.runner.workloads import llm_data as data  # noqa: E402
from workers.runner.workloads import llm_model as lm  # noqa: E402
from workers.runner.workloads.base import Workload  # noqa: E402

TOKENIZER_DIR = "tokenizer"


class LLMWorkload(Workload):
    """Next-token prediction on local text; throughput is counted in tokens."""

    unit = "tokens"

    def __init__(self, spec, run_dir: Path):
        super().__init__(spec, run_dir)
        self.llm = spec.llm
        self._splits: tuple | None = None

    # ------------------------------------------------------------------ checks

    def preflight(self) -> None:
        """Refuse missing paths and impossible shapes by field, before any process starts."""
        llm, errors = self.llm, {}
        if llm.base_model:
            base = Path(llm.base_model)
            if not (base / "config.json").is_file():
                errors["llm.base_model"] = (
                    f"{base} is not a local model directory (no config.json); give a folder "
                    "written by save_pretrained, or remove base_model to train from scratch")
            if llm.tokenizer == "bpe":
                errors["llm.tokenizer"] = ("a BPE trained now would not match base_model's "
                                           "embeddings; use byte, or the base model's tokenizer folder")
        if llm.tokenizer not in ("byte", "bpe"):
            tok = Path(llm.tokenizer)
            if not tok.is_dir() or not any((tok / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
                errors["llm.tokenizer"] = (f"{tok} is not a local tokenizer directory (no tokenizer.json); "
                                           "use byte, bpe, or a folder written by save_pretrained")
        path = self.spec.data.path
        if path:
            p = Path(path)
            if not p.exists():
                errors["data.path"] = f"{p} does not exist; give a local .txt/.jsonl file or a folder of them"
            elif not data.data_files(p):
                errors["data.path"] = f"{p} holds no .txt, .md or .jsonl files; add some or point at a file"
            elif llm.completion_only and not any(f.suffix == ".jsonl" for f in data.data_files(p)):
                errors["llm.completion_only"] = ("needs jsonl data with prompt and response on each line; "
                                                 "point data.path at such a file or turn completion_only off")
        if llm.size == "custom" and None in (llm.d_model, llm.n_layer, llm.n_head) and not llm.base_model:
            errors["llm.size"] = "custom needs d_model, n_layer and n_head; set them or pick a preset"
        ds = self.spec.deepspeed
        if self.spec.strategy_name == "deepspeed" and ds is not None and ds.precision != llm.precision:
            errors["llm.precision"] = (f"a DeepSpeed engine runs in deepspeed.precision ({ds.precision}) and ignores "
                                       f"llm.precision ({llm.precision}); set both to the same value")
        dims = lm.shape(llm)
        if dims and dims["d_model"] % dims["n_head"]:
            errors["llm.n_head"] = f"d_model {dims['d_model']} is not divisible by n_head {dims['n_head']}"
        if errors:
            raise SpecError(errors)

    # ------------------------------------------------------------------ data

    def _files(self) -> list[Path]:
        if self.spec.data.path:
            return data.data_files(Path(self.spec.data.path))
        return [data.DEMO_PAIRS] if self.llm.completion_only else data.data_files(data.DEMO_TEXT)

    def _raw_splits(self):
        """Train/validation text (or prompt/response pairs), split once."""
        if self._splits is None:
            frac = self.spec.data.val_fraction
            try:
                if self.llm.completion_only:
                    pairs = data.read_pairs(self._files())
                    n_val = max(1, int(len(pairs) * frac)) if frac > 0 and len(pairs) > 1 else 0
                    self._splits = (pairs[: len(pairs) - n_val], pairs[len(pairs) - n_val:])
                else:
                    self._splits = data.split_text(data.read_texts(self._files()), frac)
            except ValueError as exc:
                raise SpecError({"data.path": str(exc)}) from None
        return self._splits

    @cached_property
    def tokenizer(self):
        """The run's tokenizer. A BPE is trained on the training split once and kept in
        ``run_dir/tokenizer`` so a resumed run sees the same ids."""
        llm, saved = self.llm, self.run_dir / TOKENIZER_DIR
        if llm.tokenizer == "bpe":
            if (saved / "tokenizer.json").is_file():
                return data.load_tokenizer(saved)
            train = self._raw_splits()[0]
            texts = [p + r for p, r in train] if llm.completion_only else [train]
            tok = data.train_bpe(texts, llm.vocab_size)
            if _is_main():
                tmp = self.run_dir / f".{TOKENIZER_DIR}.tmp"
                tok.save_pretrained(tmp)
                if not saved.exists():
                    os.replace(tmp, saved)
            return tok
        if llm.tokenizer != "byte":
            return data.load_tokenizer(Path(llm.tokenizer))
        if llm.base_model and (Path(llm.base_model) / "tokenizer.json").is_file():
            return data.load_tokenizer(Path(llm.base_model))
        return data.byte_tokenizer()

    def datasets(self):
        """Packed ``seq_len`` blocks of the token stream (or prompt/response examples)."""
        train, val = self._raw_splits()
        tok, seq = self.tokenizer, self.llm.seq_len
        if self.llm.completion_only:
            sets = data.PromptResponse(tok, train, seq), data.PromptResponse(tok, val, seq)
        else:
            sets = data.PackedBlocks(data.encode(tok, train), seq), data.PackedBlocks(data.encode(tok, val), seq)
        if len(sets[0]) == 0:
            raise SpecError({"data.path": f"too little text for one training block of llm.seq_len={seq} "
                                          "tokens; add text or lower seq_len"})
        if self.spec.data.val_fraction > 0 and len(sets[1]) == 0:
            raise SpecError({"data.val_fraction": f"the held-out split is shorter than llm.seq_len={seq} "
                                                  "tokens; raise val_fraction, add text or lower seq_len"})
        return sets

    def collate(self, batch):
        return data.pad_collate(batch, self.tokenizer.pad_token_id)

    # ------------------------------------------------------------------ model

    def model(self) -> torch.nn.Module:
        """A Llama/GPT-2 built from the size preset, or ``base_model`` loaded; SDPA attention."""
        device = None
        if self.spec.resources.gpus_per_node and torch.cuda.is_available():
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        return lm.create(self.llm, self.tokenizer, device)

    def _eager(self):
        # Evaluation (no grad) and sampling (growing lengths) would each trigger fresh
        # compilations of the blocks for a handful of calls; run them eagerly instead.
        if self.llm.compile and hasattr(torch.compiler, "set_stance"):
            return torch.compiler.set_stance("force_eager")
        return contextlib.nullcontext()

    def _autocast(self, device: torch.device):
        if self.llm.precision != "bf16":
            return contextlib.nullcontext()
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    def _forward(self, model, batch):
        ids = batch["input_ids"]
        # A DeepSpeed engine runs its own bf16 (weights cast once) and ignores an outer autocast.
        engine = type(model).__name__ == "DeepSpeedEngine"
        with contextlib.nullcontext() if engine else self._autocast(ids.device):
            out = model(input_ids=ids, labels=batch["labels"], attention_mask=batch.get("attention_mask"))
        return out.loss

    def loss(self, model, batch) -> tuple[torch.Tensor, int]:
        """Mean next-token loss over the labelled tokens; units = tokens fed to the model."""
        mask = batch.get("attention_mask")
        units = int(mask.sum()) if mask is not None else batch["input_ids"].numel()
        return self._forward(model, batch), units

    @torch.no_grad()
    def evaluate(self, model, batches) -> dict[str, float]:
        """Token-weighted loss over the held-out split and its perplexity."""
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        with self._eager():
            for batch in batches:
                n = int((batch["labels"][:, 1:] != data.IGNORE).sum())
                if n:
                    total += float(self._forward(model, batch)) * n
                    count += n
        model.train(was_training)
        if not count:
            return {}
        loss = total / count
        return {"eval_loss": loss, "perplexity": math.exp(min(loss, 50.0))}

    # ------------------------------------------------------------------ artifacts

    def sample(self, model, prompt: str | None = None, tokens: int | None = None) -> str:
        """Text generated from ``llm.sample_prompt`` (top-k sampling, seeded)."""
        model, tok = lm.unwrap(model), self.tokenizer
        prompt = self.llm.sample_prompt if prompt is None else prompt
        tokens = self.llm.sample_tokens if tokens is None else tokens
        device = next(model.parameters()).device
        ids = torch.tensor([data.encode(tok, prompt) or [tok.eos_token_id]], device=device)
        was_training = model.training
        model.eval()
        gen = torch.Generator(device=device).manual_seed(self.spec.train.seed)
        with torch.no_grad(), self._autocast(device), self._eager():
            for _ in range(tokens):
                logits = model(input_ids=ids[:, -self.llm.seq_len:]).logits[:, -1].float()
                logits[..., len(tok):] = -float("inf")  # padded vocab rows are never tokens
                top = torch.topk(logits / 0.8, k=min(40, len(tok)))
                pick = torch.multinomial(torch.softmax(top.values, -1), 1, generator=gen)
                nxt = top.indices.gather(-1, pick)
                ids = torch.cat([ids, nxt], dim=1)
                if int(nxt) == tok.eos_token_id:
                    break
        model.train(was_training)
        return tok.decode(ids[0].tolist(), skip_special_tokens=True)

    def finish(self, model, is_main: bool) -> list[dict[str, str]]:
        """Save the model (+ tokenizer), the LoRA adapter and merged model, and a sample."""
        if not is_main:
            return []
        inner, tok, out = lm.unwrap(model), self.tokenizer, self.run_dir
        artifacts = []
        text = self.sample(inner)
        print(f"sample: {text!r}", flush=True)
        (out / "sample.txt").write_text(text + "\n", encoding="utf-8")
        artifacts.append({"name": "sample", "path": "sample.txt"})
        if self.llm.lora is not None:
            inner.save_pretrained(out / "adapter")
            tok.save_pretrained(out / "adapter")
            artifacts.append({"name": "adapter", "path": "adapter"})
            if self.llm.lora.merge:
                lm.merge_and_save(inner, out / "merged", tok)
                artifacts.append({"name": "merged", "path": "merged"})
        else:
            inner.save_pretrained(out / "model")
            tok.save_pretrained(out / "model")
            artifacts.append({"name": "model", "path": "model"})
        if not (out / TOKENIZER_DIR).exists():
            tok.save_pretrained(out / TOKENIZER_DIR)
        return artifacts


def _is_main() -> bool:
    return int(os.environ.get("RANK", "0")) == 0
