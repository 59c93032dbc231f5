"""SFT batches from SQuAD-2.0-format examples: prompt, answer span, EOS (Sec. 3.3).

Sequence = prompt_ids(context, question) + tokens(" " + answer) + EOS, right-padded to T with
EOS. labels[t] is the target for position t and -100 except on the answer tokens and the final
EOS, so the summed loss is over the answer span only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import torch
from omegaconf import DictConfig
from torch.utils.data import Dataset

from ssmax.config.compose import ConfigError
from ssmax.config.schema import DataConfig
from ssmax.data.squad import load_squad
from ssmax.data.tokenizer import Tokenizer
from ssmax.model.loss import IGNORE

log = logging.getLogger(__name__)
DEFAULT_PROMPT = DataConfig.sft_prompt  # data.sft_prompt's default (ssmax.config.schema)


def prompt_text(context: str, question: str, template: str = DEFAULT_PROMPT) -> str:
    return template.format(context=context, question=question)


def prompt_ids(
    tokenizer: Tokenizer, context: str, question: str, template: str = DEFAULT_PROMPT
) -> list[int]:
    """Token ids of the prompt; the model's answer starts right after them (needle eval too)."""
    return tokenizer.encode(prompt_text(context, question, template))


def answer_ids(tokenizer: Tokenizer, answer: str) -> list[int]:
    return [*tokenizer.encode(" " + answer), tokenizer.eos_id]


def trim_context(context: str, start: int, length: int, fits: Callable[[str], bool]) -> str | None:
    """The longest word window of context around the answer span [start, start+length) that
    fits; None when even the answer's own words do not."""
    spans = [m.span() for m in re.finditer(r"\S+", context)]
    inside = [i for i, (a, b) in enumerate(spans) if b > start and a < start + length]
    if not inside:
        return None
    first, last, n = inside[0], inside[-1] + 1, len(spans)

    def window(w: int) -> str:
        extra = w - (last - first)
        s = max(0, min(first - extra // 2, n - w))
        return context[spans[s][0] : spans[s + w - 1][1]]

    lo, hi = last - first, n  # binary search the largest window that fits
    if not fits(window(lo)):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(window(mid)) else (lo, mid - 1)
    return window(lo)


def encode_example(
    tokenizer: Tokenizer, ex: dict, seq_len: int, template: str = DEFAULT_PROMPT
) -> tuple[list[int], int] | None:
    """(token ids, prompt length) of one example; the context is trimmed to fit seq_len + 1
    tokens (inputs and shifted labels); None if it cannot fit."""
    answer, start = ex["answers"]["text"][0], ex["answers"]["answer_start"][0]
    ans = answer_ids(tokenizer, answer)
    room = seq_len + 1 - len(ans)
    prompt = prompt_ids(tokenizer, ex["context"], ex["question"], template)
    if len(prompt) > room:
        ctx = trim_context(
            ex["context"],
            start,
            len(answer),
            lambda c: len(prompt_ids(tokenizer, c, ex["question"], template)) <= room,
        )
        if ctx is None:
            return None
        prompt = prompt_ids(tokenizer, ctx, ex["question"], template)
    return prompt + ans, len(prompt)


def to_example(ids: list[int], n_prompt: int, seq_len: int, eos_id: int) -> dict:
    """Right-padded input_ids / labels of length seq_len (labels already shifted)."""
    inputs = torch.full((seq_len,), eos_id, dtype=torch.long)
    labels = torch.full((seq_len,), IGNORE, dtype=torch.long)
    seq = torch.tensor(ids, dtype=torch.long)
    inputs[: len(ids) - 1] = seq[:-1]
    # position t predicts token t+1: answer tokens start at index n_prompt
    labels[n_prompt - 1 : len(ids) - 1] = seq[n_prompt:]
    return {"input_ids": inputs, "labels": labels}


# Under a compiled loss, trimmed widths are rounded up to a multiple of this: it builds one
# graph per input shape (with exact widths an SFT epoch recompiles for minutes on a GPU:
# docs/paper-scale.md), so at most seq_len / 256 shapes, at a few percent of padding more.
# Eager: exact.
WIDTH_MULTIPLE = 256


def trim_padding(
    batch: list[dict[str, torch.Tensor]], multiple: int = 1
) -> dict[str, torch.Tensor]:
    """Stack a batch and drop the padding columns after its longest example, keeping a
    multiple of ``multiple`` (or all of them): attention is causal, so the trailing pad
    positions change no loss term (same loss, fewer FLOPs)."""
    out = {k: torch.stack([ex[k] for ex in batch]) for k in batch[0]}
    used = (out["labels"] != IGNORE).any(0).nonzero()
    full = out["labels"].shape[1]
    width = int(used[-1]) + 1 if len(used) else full
    width = min(full, -(-width // multiple) * multiple)
    return {k: v[:, :width] for k, v in out.items()}


class SFTDataset(Dataset):
    def __init__(self, encoded: list[tuple[list[int], int]], seq_len: int, eos_id: int) -> None:
        self.encoded, self.seq_len, self.eos_id = encoded, seq_len, eos_id

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        ids, n_prompt = self.encoded[k % len(self.encoded)]  # k: the sampler's epoch * n + i
        return to_example(ids, n_prompt, self.seq_len, self.eos_id)


def build_sft_dataset(data_cfg: DictConfig, tokenizer: Tokenizer, split: str) -> SFTDataset:
    seq_len = int(data_cfg.seq_len)
    template = data_cfg.sft_prompt
    examples = load_squad(data_cfg, split)
    if len(examples) == 0:  # one line naming the setting, not a run that trains on nothing
        source = f"data.sft_source={data_cfg.sft_source}"
        if data_cfg.sft_source == "generated":
            source = f"data.sft_num_examples={data_cfg.sft_num_examples}"
        raise ConfigError(
            f"{source} leaves no SFT {split} example: none passes the SQuAD filter (an answer) "
            f"in the {split} split (data.sft_val_fraction={data_cfg.sft_val_fraction})"
        )
    encoded = [encode_example(tokenizer, ex, seq_len, template) for ex in examples]
    kept = [e for e in encoded if e is not None]
    if len(kept) < len(encoded):
        log.warning("SFT %s: dropped %d examples too long for seq_len=%d",
                    split, len(encoded) - len(kept), seq_len)  # fmt: skip
    if not kept:
        raise ConfigError(
            f"data.seq_len={seq_len} fits no SFT {split} example: all {len(encoded)} need more "
            "than seq_len+1 tokens, even with the context cut to the answer's words; raise "
            "data.seq_len"
        )
    return SFTDataset(kept, seq_len, tokenizer.eos_id)
