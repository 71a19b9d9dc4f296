"""Byte-level BPE tokenizer trained on a corpus's train split, cached per corpus and vocab.

``get_tokenizer(corpus)`` returns a ``transformers.PreTrainedTokenizerFast`` whose only
special token is ``<|endoftext|>`` (id 0), used as EOS (document separator in packing) and
as pad token (for batching in evaluation harnesses); there is no BOS and ``encode`` adds no
special tokens. Byte-level pre-tokenization (GPT-2 regex, no prefix space) means every
string round-trips exactly: ``decode(encode(x)) == x``.

Trained tokenizers live in ``<cache root>/tokenizers/<corpus fingerprint>-<vocab>/`` in
Hugging Face format (plus ``mhar_meta.json``), written to a temporary directory and renamed,
so racing processes (torchrun ranks) cannot corrupt it; every caller loads the copy that
won the race, so all ranks use the same tokenizer. BPE training on the 11 MB embedded
corpus takes about 1.5 s on two CPU cores; on larger corpora it uses a deterministic sample
(the first ``TRAIN_SAMPLE_BYTES`` of the train split in its hash order).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ..atomic import build_dir
from .cache import cache_subdir
from .corpus import Corpus
from .document import Document
from .errors import DataError

EOS_TOKEN = "<|endoftext|>"
DEFAULT_VOCAB_SIZE = 4096
#: BPE is trained on at most this many bytes of the train split (in its hash order).
TRAIN_SAMPLE_BYTES = 32 * 2**20
META_FILE = "mhar_meta.json"


def training_sample(docs: list[Document], max_bytes: int = TRAIN_SAMPLE_BYTES) -> list[Document]:
    """Leading documents (at least one) whose total size stays within ``max_bytes``."""
    sample: list[Document] = []
    used = 0
    for doc in docs:
        if sample and used + doc.n_bytes > max_bytes:
            break
        sample.append(doc)
        used += doc.n_bytes
    return sample


def _train_bpe(docs: list[Document], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE with ``<|endoftext|>`` as token 0."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=sys.stderr.isatty(),
    )
    tok.train_from_iterator((d.text for d in docs), trainer=trainer, length=len(docs))
    return tok


def wrap_tokenizer(tok: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` for transformers: EOS = pad = ``<|endoftext|>``, no BOS."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved on disk in Hugging Face format (never downloads).

    ``path`` is a directory written by ``save_pretrained`` or a ``tokenizer.json`` file.
    If the tokenizer has an EOS but no pad token, EOS is used for padding.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"{path}: no such tokenizer file or directory")
    try:
        if p.is_file():
            tok = PreTrainedTokenizerFast(tokenizer_file=str(p), clean_up_tokenization_spaces=False)
        else:
            tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... here
        raise DataError(f"{path}: not a Hugging Face tokenizer ({type(exc).__name__}: {exc})") from exc
    if not getattr(tok, "is_fast", False):
        raise DataError(f"{path}: loaded a slow tokenizer ({type(tok).__name__}); a fast one is needed")
    if tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token
    return tok


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """SHA-256 of the tokenizer's definition (model, pre-tokenizer, added tokens ...).

    Runtime padding/truncation settings are left out, so they do not change the hash.
    """
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec.pop("padding", None)
    spec.pop("truncation", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()


def train_corpus_tokenizer(train: list[Document], vocab_size: int, sample_bytes: int = TRAIN_SAMPLE_BYTES
                           ) -> tuple[PreTrainedTokenizerFast, dict[str, object]]:
    """The byte-level BPE of ``vocab_size`` trained on :func:`training_sample` of ``train`` (its first
    ``sample_bytes``), and what it was trained on (the corpus builders save both in their folder)."""
    if vocab_size < 257:
        raise DataError(f"vocab_size must be at least 257 (256 bytes + {EOS_TOKEN}), got {vocab_size}")
    sample = training_sample(train, sample_bytes)
    start = time.perf_counter()
    tok = wrap_tokenizer(_train_bpe(sample, vocab_size))
    meta: dict[str, object] = {
        "vocab_size_requested": vocab_size, "vocab_size": len(tok), "train_documents": len(sample),
        "train_bytes": sum(d.n_bytes for d in sample), "train_seconds": round(time.perf_counter() - start, 3),
        "tokenizers_version": tokenizers.__version__}
    return tok, meta


def tokenizer_dir(corpus: Corpus, vocab_size: int) -> Path:
    """Cache directory of the tokenizer for ``corpus`` and ``vocab_size``."""
    return cache_subdir("tokenizers") / f"{corpus.fingerprint}-{vocab_size}"


def get_tokenizer(
    corpus: Corpus, vocab_size: int = DEFAULT_VOCAB_SIZE, path: str | None = None
) -> PreTrainedTokenizerFast:
    """The tokenizer at ``path`` if given; else a built corpus's own tokenizer when it was trained
    for ``vocab_size``; else the cached (or newly trained) BPE for ``corpus``.

    The trained vocabulary can be smaller than ``vocab_size`` only if the train split has
    too few distinct byte pairs; ``len(tokenizer)`` is the size to give the model.
    """
    if path is not None:
        return load_tokenizer(path)
    if corpus.tokenizer_dir is not None and corpus.tokenizer_vocab == vocab_size:
        return load_tokenizer(corpus.tokenizer_dir)
    if vocab_size < 257:
        raise DataError(f"vocab_size must be at least 257 (256 bytes + {EOS_TOKEN}), got {vocab_size}")
    final = tokenizer_dir(corpus, vocab_size)
    if not (final / "tokenizer.json").is_file():

        def fill(tmp: Path) -> None:
            sample = training_sample(corpus.train)
            start = time.perf_counter()
            tok = wrap_tokenizer(_train_bpe(sample, vocab_size))
            seconds = time.perf_counter() - start
            tok.save_pretrained(str(tmp))
            meta = {
                "corpus": corpus.name,
                "corpus_fingerprint": corpus.fingerprint,
                "vocab_size_requested": vocab_size,
                "vocab_size": len(tok),
                "train_documents": len(sample),
                "train_bytes": sum(d.n_bytes for d in sample),
                "train_seconds": round(seconds, 3),
                "tokenizers_version": tokenizers.__version__,
                "python_version": platform.python_version(),
            }
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")

        build_dir(final, fill)  # the first writer wins
    return load_tokenizer(final)
