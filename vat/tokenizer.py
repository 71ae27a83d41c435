"""Byte-level BPE over Hugging Face `tokenizers`, and the special tokens' ids: no text maps to
<unk> and decoding returns the input exactly, which reconstruction BLEU and exact match need."""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from vat.errors import OptionError, VatError, check_count, check_sentences, one_line

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)

OTHER_CHARS_PER_TOKEN = 1000  # chars_per_token of another tokenizer: no word is that long
# clip keeps twice the characters the kept tokens can cover: BPE never merges across
# pre-tokens, so the cut changes only the word it falls in, far after the kept tokens
CLIP_MARGIN = 2


class VATTokenizer:
    """A thin wrapper over `tokenizers.Tokenizer` with vat's special-token layout."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        for i, tok in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(tok) != i:
                raise ValueError(
                    f"tokenizer must map {tok!r} to id {i} (vat's special-token layout)"
                )
        self.tokenizer = tokenizer

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int = 32768,
        min_frequency: int = 2,
        progress: bool = False,
        length: int | None = None,
    ) -> VATTokenizer:
        """Train byte-level BPE on sentences; the trainer's bars only on a terminal, since it
        ends each stage with an empty line on stdout."""
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=progress and sys.stdout.isatty() and sys.stderr.isatty(),
        )
        tok.train_from_iterator(_batched(texts), trainer=trainer, length=length)
        return cls(tok)

    @classmethod
    def from_file(cls, path: str | Path) -> VATTokenizer:
        """A tokenizers JSON file; a bad one is a one-line error."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"tokenizer file {path} does not exist (expected a tokenizers JSON file)"
            )
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise VatError(
                f"tokenizer file {path} is not a valid tokenizers JSON file ({one_line(e)[:160]})"
            ) from None
        try:
            return cls(tok)
        except ValueError as e:
            raise VatError(f"tokenizer file {path}: {e}") from None

    @classmethod
    def from_str(cls, json_str: str) -> VATTokenizer:
        return cls(Tokenizer.from_str(json_str))

    def to_str(self) -> str:
        return self.tokenizer.to_str()

    def save(self, path: str | Path) -> None:
        self.tokenizer.save(str(path))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Subword ids of one sentence, without special tokens (the first `max_tokens`)."""
        if max_tokens is not None:
            text = self.clip(text, max_tokens)
        return self.tokenizer.encode(text, add_special_tokens=False).ids[:max_tokens]

    def encode_batch(self, texts: Sequence[str], max_tokens: int | None = None) -> list[list[int]]:
        """Subword ids of each text; with `max_tokens` a 10 MB line costs what a short one does."""
        if max_tokens is not None:
            texts = [self.clip(t, max_tokens) for t in texts]
        encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [e.ids[:max_tokens] for e in encoded]

    @functools.cached_property
    def chars_per_token(self) -> int:
        """The most characters one token can stand for: in byte-level BPE without a normalizer,
        the longest vocabulary entry (one symbol per byte)."""
        t = self.tokenizer
        byte_level = (
            t.normalizer is None
            and isinstance(t.pre_tokenizer, pre_tokenizers.ByteLevel)
            and isinstance(t.model, models.BPE)
        )
        if not byte_level:
            return OTHER_CHARS_PER_TOKEN
        return max(len(token) for token in t.get_vocab(with_added_tokens=True))

    def max_chars(self, max_tokens: int) -> int:
        """Characters `clip` keeps: enough for more than max_tokens tokens."""
        return CLIP_MARGIN * max(int(max_tokens), 1) * self.chars_per_token

    def clip(self, text: str, max_tokens: int) -> str:
        """`text` cut to max_chars(max_tokens): tokenising costs memory in proportion to it."""
        limit = self.max_chars(max_tokens)
        return text if len(text) <= limit else text[:limit]

    def __call__(
        self,
        text: str | Sequence[str],
        *,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        return_tensors: str | None = None,
        add_special_tokens: bool = True,
        return_attention_mask: bool = True,
    ) -> TokenizerOutput:
        """`tok(["a", "b"], padding=True, return_tensors="pt")` as in transformers: `input_ids`
        (make_batch's `src`, w_1..w_n </s>) and `attention_mask`."""
        texts, single = check_sentences(text, "text")
        pad = _PADDING.get(padding) if isinstance(padding, bool | str) else None
        if pad is None:
            raise OptionError("padding", f"must be one of {_choices(_PADDING)}, got {padding!r}")
        cut = _TRUNCATION.get(truncation) if isinstance(truncation, bool | str | None) else None
        if cut is None:
            raise OptionError(
                "truncation", f"must be one of {_choices(_TRUNCATION)}, got {truncation!r}"
            )
        if return_tensors not in (None, "pt", "np"):
            raise OptionError(
                "return_tensors", f"must be None, 'pt' or 'np', got {return_tensors!r}"
            )
        special = int(bool(add_special_tokens))  # the </s> each sequence ends with
        if max_length is not None:
            check_count(max_length, "max_length", minimum=1 + special)
        elif pad == "max_length" or cut == "cut":
            raise OptionError(
                "max_length", f"is needed with padding={padding!r} / truncation={truncation!r}"
            )
        keep = max_length - special if cut == "cut" else None
        ids = [x + [EOS_ID] * special for x in self.encode_batch(texts, keep)]
        width = {"no": 0, "max_length": max_length}.get(pad, max(map(len, ids), default=0))
        mask = [[1] * len(x) + [0] * max(width - len(x), 0) for x in ids]
        ids = [x + [PAD_ID] * max(width - len(x), 0) for x in ids]
        out = TokenizerOutput(input_ids=ids, attention_mask=mask)
        if not return_attention_mask:
            del out["attention_mask"]
        if return_tensors is None:
            return TokenizerOutput({k: v[0] for k, v in out.items()}) if single else out
        if len({len(x) for x in ids}) > 1:
            raise OptionError(
                "padding",
                f"return_tensors={return_tensors!r} needs equal lengths: give padding=True "
                "for texts of different lengths",
            )
        if return_tensors == "pt":
            return TokenizerOutput({k: torch.tensor(v, dtype=torch.long) for k, v in out.items()})
        return TokenizerOutput({k: np.asarray(v, dtype=np.int64) for k, v in out.items()})

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids, cut at the first </s> and without special tokens."""
        ids = list(ids)
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        return self.tokenizer.decode([i for i in ids if i >= len(SPECIAL_TOKENS)])

    def decode_batch(self, batch: Sequence[Sequence[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def token_text(self, i: int) -> str:
        """Readable text of one subword (byte-level symbols decoded)."""
        if i >= len(SPECIAL_TOKENS):
            return self.tokenizer.decode([i])
        return self.tokenizer.id_to_token(i) or UNK


# transformers' spellings of the call's options -> what they do here
_PADDING = {False: "no", "do_not_pad": "no", True: "longest", "longest": "longest"}
_PADDING.update({"max_length": "max_length"})
_TRUNCATION = {None: "no", False: "no", "do_not_truncate": "no"}
_TRUNCATION.update({True: "cut", "longest_first": "cut", "only_first": "cut"})


def _choices(table: dict) -> str:
    return ", ".join(repr(k) for k in table)


class TokenizerOutput(dict):
    """As transformers' BatchEncoding: a dict whose keys are also attributes, with `.to`."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device: str | torch.device) -> TokenizerOutput:
        return TokenizerOutput(
            {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.items()}
        )


def _batched(texts: Iterable[str], size: int = 1000) -> Iterator[list[str]]:
    it = iter(texts)
    while batch := list(itertools.islice(it, size)):
        yield batch


def make_batch(
    sequences: Sequence[Sequence[int]], max_len: int | None = None
) -> dict[str, torch.Tensor]:
    """src = tgt_out = w_1..w_n </s> and tgt_in = <s> w_1..w_n; `max_len` counts the </s>."""
    if max_len is not None:
        sequences = [list(s)[: max_len - 1] for s in sequences]
    B, T = len(sequences), max(len(s) for s in sequences) + 1
    src, tgt_in = (torch.full((B, T), PAD_ID, dtype=torch.long) for _ in range(2))
    for i, s in enumerate(sequences):
        n = len(s)
        ids = torch.as_tensor(list(s), dtype=torch.long)
        src[i, :n] = ids
        src[i, n] = EOS_ID
        tgt_in[i, 0] = BOS_ID
        tgt_in[i, 1 : n + 1] = ids
    return {"src": src, "tgt_in": tgt_in, "tgt_out": src.clone()}
