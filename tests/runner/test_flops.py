"""The FLOPs per token behind the MFU figures in docs/BENCHMARKS.md: a causal decoder's attention
is half of PaLM's full T×T term, and lookups (token and position embeddings) are not matmuls."""
from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from workers.runner.workloads.llm_model import flops_per_token


def test_gpt2_flops_count_blocks_and_head_but_not_position_embeddings_and_half_of_attention():
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=128, vocab_size=300))
    blocks_and_final_norm = sum(p.numel() for name, p in model.named_parameters() if not name.startswith(
        ("transformer.wte", "transformer.wpe")))
    tied_head = 300 * 64  # GPT-2's head is the token embedding: it does a matmul per token
    assert flops_per_token(model, 128) == 6 * (blocks_and_final_norm + tied_head) + 6 * 2 * 64 * 128


def test_llama_flops_leave_out_the_untied_token_embedding_only():
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                             num_attention_heads=2, vocab_size=300, tie_word_embeddings=False))
    total = sum(p.numel() for p in model.parameters())
    assert flops_per_token(model, 256) == 6 * (total - 300 * 64) + 6 * 2 * 64 * 256
