"""Causal LM construction for the LLM workload: size presets, configs, LoRA, merging."""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

# d_model, n_layer, n_head, (llama) n_kv_head, (llama) intermediate size.
# Parameter counts are of the transformer blocks; embeddings depend on the tokenizer.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(d_model=64, n_layer=2, n_head=4, n_kv_head=4, ffn=172),        # ~0.1M
    "small": dict(d_model=256, n_layer=4, n_head=4, n_kv_head=4, ffn=688),      # ~3M
    "125m": dict(d_model=768, n_layer=12, n_head=12, n_kv_head=12, ffn=2048),   # ~85M + emb
    "350m": dict(d_model=1024, n_layer=24, n_head=16, n_kv_head=16, ffn=2816),  # ~310M + emb
    "1b": dict(d_model=2048, n_layer=22, n_head=32, n_kv_head=4, ffn=5632),     # TinyLlama shape
}
LORA_TARGETS = {"llama": ["q_proj", "k_proj", "v_proj", "o_proj"], "gpt2": ["c_attn"]}


def shape(llm) -> dict[str, int]:
    """The model shape a spec's ``llm`` section asks for (preset, then explicit overrides)."""
    dims = dict(PRESETS.get(llm.size, {}))
    custom = {k: v for k, v in (("d_model", llm.d_model), ("n_layer", llm.n_layer),
                                ("n_head", llm.n_head)) if v is not None}
    if custom:
        dims.update(custom)
        if "n_head" in custom or "d_model" in custom:
            dims["n_kv_head"] = dims["n_head"]
        if "d_model" in custom:
            dims["ffn"] = _ffn(dims["d_model"])
    return dims


def _ffn(d_model: int) -> int:
    # Llama's SwiGLU width: 8/3 * d rounded up to a multiple of 64 (keeps matmuls aligned).
    return -(-int(8 * d_model / 3) // 64) * 64


def build_config(llm, vocab_size: int, tok):
    """A transformers config for a fresh model; vocab padded to a multiple of 64."""
    from transformers import GPT2Config, LlamaConfig

    dims = shape(llm)
    vocab = -(-vocab_size // 64) * 64
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    if llm.arch == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=dims["d_model"], n_layer=dims["n_layer"],
                          n_head=dims["n_head"], n_positions=llm.seq_len, use_cache=False, **ids)
    return LlamaConfig(vocab_size=vocab, hidden_size=dims["d_model"], intermediate_size=dims["ffn"],
                       num_hidden_layers=dims["n_layer"], num_attention_heads=dims["n_head"],
                       num_key_value_heads=dims["n_kv_head"], max_position_embeddings=llm.seq_len,
                       tie_word_embeddings=dims["d_model"] < 1024, use_cache=False, **ids)


def create(llm, tok, device: torch.device | None = None):
    """A fresh model from the config, or the local ``base_model`` checkpoint, with SDPA.

    ``device`` is where a fresh model is initialised (a GPU initialises 1B parameters in
    a blink where a CPU takes many seconds); the strategy moves it where it belongs anyway.
    """
    from transformers import AutoModelForCausalLM

    if llm.base_model:
        model = AutoModelForCausalLM.from_pretrained(
            llm.base_model, local_files_only=True, attn_implementation="sdpa", dtype=torch.float32)
        if model.get_input_embeddings().num_embeddings < len(tok):
            model.resize_token_embeddings(len(tok))
    else:
        with device or contextlib.nullcontext():
            model = AutoModelForCausalLM.from_config(build_config(llm, len(tok), tok),
                                                     attn_implementation="sdpa")
    model.config.use_cache = False
    if llm.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if llm.lora is not None:
        model = add_lora(model, llm)
    if llm.compile:
        compile_blocks(model)
    return model


def add_lora(model, llm):
    """Wrap ``model`` with LoRA adapters (peft); only the adapters train."""
    from peft import LoraConfig, get_peft_model

    arch = getattr(model.config, "model_type", llm.arch)
    targets = llm.lora.target_modules or LORA_TARGETS.get(arch, LORA_TARGETS["llama"])
    cfg = LoraConfig(r=llm.lora.r, lora_alpha=llm.lora.alpha, lora_dropout=llm.lora.dropout,
                     target_modules=targets, task_type="CAUSAL_LM",
                     fan_in_fan_out=arch == "gpt2")
    if llm.gradient_checkpointing:
        # Frozen embeddings would give checkpointed blocks inputs without grad.
        model.enable_input_require_grads()
    return get_peft_model(model, cfg)


def compile_blocks(model) -> None:
    """torch.compile each transformer block in place (torchtitan style): parameter names,
    state dicts and save_pretrained stay as they are, and DDP/DeepSpeed wrap it as usual."""
    for module in model.modules():
        if type(module).__name__ in ("LlamaDecoderLayer", "GPT2Block"):
            module.compile()


def unwrap(model):
    """The transformers/peft model inside DDP, a DeepSpeed engine or torch.compile."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None or not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def count_params(model) -> tuple[int, int]:
    """(all parameters, parameters that do matmul work per token: all but the token embeddings,
    unless tied to the output head, and the learned position embeddings, a lookup like them)."""
    inner = unwrap(model)
    total = sum(p.numel() for p in inner.parameters())
    emb = inner.get_input_embeddings().weight
    head = inner.get_output_embeddings()
    tied = head is not None and head.weight is emb
    lookups = 0 if tied else emb.numel()
    wpe = getattr(getattr(inner, "transformer", None), "wpe", None)  # GPT-2; Llama's RoPE has no parameters
    if isinstance(wpe, torch.nn.Embedding):
        lookups += wpe.weight.numel()
    return total, total - lookups


def flops_per_token(model, seq_len: int) -> float:
    """Training FLOPs per token for a causal decoder: 6N + 6·L·d·T (N: matmul parameters).

    PaLM's appendix B counts attention as 12·L·d·T, the full T×T score and value matmuls; a causal
    mask leaves half of them to compute (FlashAttention's benchmarks count causal attention at half
    too), so 6·L·d·T. This gives a lower MFU than PaLM's formula for the same tokens/s."""
    cfg = unwrap(model).config
    _, n = count_params(unwrap(model))
    layers = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
    d = getattr(cfg, "hidden_size", None) or cfg.n_embd
    return 6.0 * n + 6.0 * layers * d * seq_len


def merge_and_save(peft_model, out: Path, tok) -> Path:
    """Fold the LoRA weights into the base and save a standalone model (no peft needed)."""
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(out)
    tok.save_pretrained(out)
    return out
