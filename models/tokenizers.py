"""Prompt tokenizers for model families whose checkpoints come with a SentencePiece vocabulary (PaliGemma's
for Pi0.5), and two that need no download: bytes (for tiny or random-weight models, where any fixed
tokenisation serves) and a stand-in for a real vocabulary when measuring training speed without it."""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Protocol

from .extras import pip_install


class Tokenizer(Protocol):
    name: str

    def encode(self, text: str, add_bos: bool = False) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens (BOS 2, bytes from 3)."""

    name = "bytes"

    def __init__(self, vocab: int):
        if vocab < 259:
            raise ValueError(f"the byte tokenizer needs a vocabulary of at least 259, the model has {vocab}")

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        return ([2] if add_bos else []) + [3 + b for b in text.encode("utf-8")]


class StandInTokenizer:
    """Stands in for a SentencePiece vocabulary that cannot be downloaded here: the same vocabulary size and
    about the same work and token count per prompt (SentencePiece-like pieces: a word with its leading space,
    long words split in 5-character pieces, digits and punctuation on their own), each piece mapped to an id
    by a stable hash. The ids mean nothing; the cost and shapes are those of a real tokenizer, so a data path
    measured with it is the real one but for the vocabulary."""

    _PIECES = re.compile(r" ?[A-Za-z]+| ?\d|[^\sA-Za-z\d]| ")

    def __init__(self, vocab: int, name: str | None = None):
        self.vocab = vocab
        self.name = name or f"stand-in (hashed pieces, vocab {vocab})"

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        ids = [2] if add_bos else []
        for piece in self._PIECES.findall(text):
            for i in range(0, len(piece), 5):
                ids.append(3 + zlib.crc32(piece[i : i + 5].encode()) % (self.vocab - 3))
        return ids


# Tokenizers that need no file, by the name a checkpoint records: UTF-8 bytes, or the stand-in's hashed pieces for
# a small model that should see about as many prompt tokens as a SentencePiece vocabulary gives (libero_spatial's
# longest prompt with the widest state: 145 bytes, 61 pieces)
BUILTIN = ("bytes", "pieces")


def builtin_tokenizer(name: str, vocab: int) -> Tokenizer:
    """The file-free tokenizer `name` (BUILTIN) for a model of `vocab` ids."""
    if name == "bytes":
        return ByteTokenizer(vocab)
    if name == "pieces":
        return StandInTokenizer(vocab, name="pieces")
    raise ValueError(f"tokenizer {name!r}: expected one of {', '.join(BUILTIN)} or a SentencePiece model file")


class SentencePieceTokenizer:
    """A SentencePiece model file (`tokenizer.model`)."""

    def __init__(self, path):
        try:
            import sentencepiece
        except ImportError:
            raise ValueError(
                "a SentencePiece tokenizer needs the sentencepiece package (pip install sentencepiece, or "
                f"vlabench[sim]: {pip_install('sim')})"
            ) from None
        self.name = str(path)
        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        return self._sp.encode(text, add_bos=add_bos)


def load_sentencepiece(spec: str, filename: str = "tokenizer.model") -> SentencePieceTokenizer:
    """A SentencePiece tokenizer from a file, or from a Hugging Face Hub repository id (downloaded); raises
    ValueError in one line when neither works."""
    if Path(spec).is_file():
        return SentencePieceTokenizer(spec)
    if Path(spec).exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", spec):
        raise ValueError(f"tokenizer {spec!r}: expected a SentencePiece model file or a Hub id, got no such file")
    try:
        from huggingface_hub import hf_hub_download

        return SentencePieceTokenizer(hf_hub_download(spec, filename))
    except Exception as e:  # no network, gated repository, no huggingface_hub
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"tokenizer {spec!r}: the Hub download failed ({reason})") from None
