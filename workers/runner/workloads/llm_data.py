"""Text data and tokenizers for the LLM workload, all offline.

Tokenizers are ``transformers.PreTrainedTokenizerFast`` objects so that they save next to
the model and load back with ``AutoTokenizer.from_pretrained`` (no network):

- ``byte``: byte-level BPE with no merges, i.e. one token per UTF-8 byte (+ specials);
- ``bpe``: byte-level BPE trained here on the training split with ``tokenizers``;
- a directory: whatever ``AutoTokenizer`` finds there (``local_files_only``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import torch
from torch.utils.data import Dataset

CORPUS_DIR = Path(__file__).resolve().parent.parent / "corpus"
DEMO_TEXT = CORPUS_DIR / "text"
DEMO_PAIRS = CORPUS_DIR / "instructions.jsonl"
TEXT_SUFFIXES = (".txt", ".md", ".jsonl")
EOS, PAD = "<|endoftext|>", "<|pad|>"
IGNORE = -100
CHUNK = 1 << 16  # characters per piece when encoding long texts in parallel


# ---------------------------------------------------------------- reading files

def data_files(path: Path) -> list[Path]:
    """The text files a data path names: the file itself, or every txt/md/jsonl below a folder."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)


def read_texts(files: Iterable[Path]) -> list[str]:
    """Plain documents: a txt/md file is one document; a jsonl line gives ``text``
    (or ``prompt`` + ``response`` joined, so pair data also works for pretraining)."""
    docs: list[str] = []
    for f in files:
        if f.suffix == ".jsonl":
            for row in _jsonl(f):
                if "text" in row:
                    docs.append(str(row["text"]))
                elif "prompt" in row and "response" in row:
                    docs.append(str(row["prompt"]) + str(row["response"]))
                else:
                    raise ValueError(f"{f}: each line needs 'text' or 'prompt' and 'response'")
        else:
            docs.append(f.read_text(encoding="utf-8", errors="replace"))
    return [d for d in docs if d.strip()]


def read_pairs(files: Iterable[Path]) -> list[tuple[str, str]]:
    """(prompt, response) rows from jsonl files, for completion-only fine-tuning."""
    pairs = []
    for f in files:
        if f.suffix != ".jsonl":
            raise ValueError(f"{f}: completion_only needs jsonl lines with 'prompt' and 'response'")
        for row in _jsonl(f):
            if "prompt" not in row or "response" not in row:
                raise ValueError(f"{f}: each line needs 'prompt' and 'response'")
            pairs.append((str(row["prompt"]), str(row["response"])))
    return pairs


def _jsonl(path: Path) -> Iterable[dict]:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:
                raise ValueError(f"{path}:{n}: not valid JSON") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: each line must be a JSON object")
            yield row


def split_text(docs: list[str], val_fraction: float) -> tuple[str, str]:
    """Join documents with EOS and cut the stream into (train, validation) text.

    The cut is contiguous (the tail is held out) so no validation text leaks into
    training, and it snaps to a line break when there is one near the cut.
    """
    text = EOS.join(docs) + EOS
    if val_fraction <= 0:
        return text, ""
    cut = int(len(text) * (1 - val_fraction))
    newline = text.rfind("\n", max(0, cut - 2000), cut)
    cut = newline + 1 if newline > 0 else cut
    return text[:cut], text[cut:]


# ---------------------------------------------------------------- tokenizers

def _wrap(tok) -> "PreTrainedTokenizerFast":  # noqa: F821
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS,
                                   pad_token=PAD, unk_token=None)


def byte_tokenizer():
    """One token per UTF-8 byte plus EOS and PAD (258 ids); lossless on any text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab[EOS], vocab[PAD] = len(vocab), len(vocab) + 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS, PAD])
    wrapped = _wrap(tok)
    # byte -> id, so long texts skip the regex pre-tokenizer (see ``encode``)
    wrapped.byte_table = torch.tensor([vocab[c] for c in _byte_chars()], dtype=torch.long)
    return wrapped


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character map, the one ByteLevel uses."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def train_bpe(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE trained here on ``texts`` (deterministic for the same input)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    # EOS joins documents in our streams; train on the pieces so it never becomes a merge.
    tok.train_from_iterator((p for t in texts for p in t.split(EOS)), trainer=trainer)
    return _wrap(tok)


def load_tokenizer(path: Path):
    """A tokenizer saved in a local directory; never touches the network."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tok.eos_token is None:
        tok.add_special_tokens({"eos_token": EOS})
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def encode(tok, text: str) -> list[int]:
    """Token ids of ``text`` with EOS markers mapped to the EOS id, no BOS added.

    Long texts are cut at line breaks into chunks that the Rust tokenizer encodes in
    parallel; the byte tokenizer maps bytes through a table instead.
    """
    table = getattr(tok, "byte_table", None)
    if table is not None:
        ids: list[int] = []
        for i, piece in enumerate(text.split(EOS)):
            if i:
                ids.append(tok.eos_token_id)
            raw = torch.frombuffer(bytearray(piece.encode("utf-8")), dtype=torch.uint8) if piece else None
            if raw is not None:
                ids.extend(table[raw.long()].tolist())
        return ids
    if len(text) < CHUNK:
        return tok(text, add_special_tokens=False)["input_ids"]
    chunks, start = [], 0
    while start < len(text):
        end = text.find("\n", start + CHUNK)
        end = len(text) if end < 0 else end + 1
        chunks.append(text[start:end])
        start = end
    return [i for row in tok(chunks, add_special_tokens=False)["input_ids"] for i in row]


# ---------------------------------------------------------------- datasets

class PackedBlocks(Dataset):
    """A token stream cut into fixed ``seq_len`` blocks; labels are the inputs
    (the model shifts them), so every token but the first of a block is predicted."""

    def __init__(self, ids: list[int], seq_len: int):
        n = len(ids) // seq_len
        self.data = torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)

    def __len__(self) -> int:
        return self.data.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


class PromptResponse(Dataset):
    """One example per prompt/response pair; the prompt's labels are IGNORE so the loss
    covers only the response (and its EOS)."""

    def __init__(self, tok, pairs: list[tuple[str, str]], seq_len: int):
        self.rows = []
        for prompt, response in pairs:
            p = encode(tok, prompt)
            r = encode(tok, response) + [tok.eos_token_id]
            ids = (p + r)[:seq_len]
            labels = ([IGNORE] * len(p) + r)[:seq_len]
            if any(x != IGNORE for x in labels[1:]):
                self.rows.append((torch.tensor(ids), torch.tensor(labels)))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids, labels = self.rows[i]
        return {"input_ids": ids, "labels": labels}


def pad_collate(batch: list[dict[str, torch.Tensor]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a list of examples; padding is masked out of attention and loss.

    Equal-length batches (packed blocks) get no attention mask, so SDPA can take its
    causal flash path without inspecting a mask.
    """
    width = max(b["input_ids"].shape[0] for b in batch)
    if all(b["input_ids"].shape[0] == width for b in batch):
        return {"input_ids": torch.stack([b["input_ids"] for b in batch]),
                "labels": torch.stack([b["labels"] for b in batch])}
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, b in enumerate(batch):
        n = b["input_ids"].shape[0]
        ids[i, :n], labels[i, :n], mask[i, :n] = b["input_ids"], b["labels"], 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}
