"""Tokenize documents into one stream and pack it into fixed-length training rows.

The stream is ``doc_1 <eos> doc_2 <eos> ... doc_n <eos>``: every document is followed by
the end-of-text id, as in the paper's pipeline (documents joined with the end-of-text
token, packed into contiguous sequences, no padding). ``pack_tokens`` cuts the stream into
consecutive rows of ``seq_len + 1`` tokens (inputs ``row[:-1]``, labels ``row[1:]``) and
drops the ragged tail. Token arrays are cached as ``.npy`` under
``<cache root>/tokens/<corpus fp>-<tokenizer fp>-<split>.npy`` (written atomically).

Text that literally contains a special token (``<|endoftext|>``) is encoded as that
token, as Hugging Face tokenizers do; ``.txt`` inputs are split there into documents.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from .cache import cache_subdir, save_npy_atomically
from .corpus import Corpus
from .document import Document
from .errors import DataError
from .tokenizer import tokenizer_fingerprint

#: Documents per ``encode_batch_fast`` call (the Rust side parallelises within a batch).
BATCH_DOCS = 256


def token_dtype(vocab_size: int) -> type[np.integer]:
    """Smallest dtype holding every id: uint16 up to 65,536 tokens, else int32."""
    return np.uint16 if vocab_size <= 2**16 else np.int32


def token_cache_path(cache_key: str) -> Path:
    """Where ``tokenize_split`` caches the array for ``cache_key``."""
    return cache_subdir("tokens") / f"{cache_key}.npy"


def _plain_backend(tokenizer: PreTrainedTokenizerBase) -> Tokenizer:
    """A copy of the Rust tokenizer with padding and truncation off."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()
    backend.no_truncation()
    return backend


def tokenize_split(
    docs: list[Document], tokenizer: PreTrainedTokenizerBase, cache_key: str | None = None, *,
    batch_docs: int = BATCH_DOCS, lengths: list[int] | None = None,
) -> np.ndarray:
    """Token ids of ``docs`` joined as ``d1 <eos> d2 <eos> ... dn <eos>``.  # [N]

    Returns a 1-D uint16 (vocab <= 65,536) or int32 array. With ``cache_key`` the array is
    read from / written to the token cache; the key must identify docs and tokenizer
    (:func:`token_cache_key`). ``batch_docs``: documents per Rust call (more keep more cores
    busy); ``lengths``: filled with each document's tokens, its end-of-text id included (only
    when the array is tokenized here, not read from the cache).
    """
    if cache_key is not None:
        path = token_cache_path(cache_key)
        if path.is_file():
            return np.load(path)
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DataError(f"tokenizer {tokenizer.name_or_path or type(tokenizer).__name__!r} has no EOS token")
    backend = _plain_backend(tokenizer)
    dtype = token_dtype(max(len(tokenizer), backend.get_vocab_size(with_added_tokens=True)))
    eos_arr = np.array([eos], dtype=dtype)
    chunks: list[np.ndarray] = []
    total_bytes = sum(d.n_bytes for d in docs)
    with tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenize", leave=False, disable=None) as bar:
        for start in range(0, len(docs), batch_docs):
            batch = docs[start : start + batch_docs]
            for enc in backend.encode_batch_fast([d.text for d in batch], add_special_tokens=False):
                chunks.append(np.asarray(enc.ids, dtype=dtype))
                chunks.append(eos_arr)
                if lengths is not None:
                    lengths.append(len(enc.ids) + 1)
            bar.update(sum(d.n_bytes for d in batch))
    ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)  # [N]
    if cache_key is not None:
        save_npy_atomically(token_cache_path(cache_key), ids)
    return ids


def pack_tokens(ids: np.ndarray, seq_len: int, *, what: str = "token stream") -> torch.LongTensor:
    """Consecutive rows of ``seq_len + 1`` tokens from ``ids``; the ragged tail is dropped.

    Row ``m`` is ``ids[m * (seq_len + 1) : (m + 1) * (seq_len + 1)]``; train on
    ``row[:-1]`` -> ``row[1:]``. ``what`` names the stream in error messages.
    Returns a ``torch.LongTensor`` of shape ``[M, seq_len + 1]``.
    """
    if seq_len < 1:
        raise DataError(f"seq_len must be at least 1, got {seq_len}")
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise DataError(f"{what}: expected a 1-D token array, got shape {ids.shape}")
    row = seq_len + 1
    n_rows = len(ids) // row
    if n_rows == 0:
        raise DataError(
            f"{what}: only {len(ids)} tokens, but one row of seq_len + 1 = {row} tokens needs "
            f"at least {row}; use more data (e.g. a larger max_bytes) or a shorter seq_len"
        )
    rows = np.ascontiguousarray(ids[: n_rows * row], dtype=np.int64).reshape(n_rows, row)  # [M, T+1]
    return torch.from_numpy(rows)


def document_index(rows: torch.LongTensor, eos_id: int) -> torch.LongTensor:
    """The document of every token of packed rows [M, L] (consecutive chunks of one stream
    ``d_0 <eos> d_1 <eos> ...``): the number of end-of-text ids before it in the stream, so a
    document's closing <eos> belongs to it.  # [M, L]"""
    flat = rows.reshape(-1)
    ends = (flat == eos_id).long()
    return (torch.cumsum(ends, 0) - ends).reshape(rows.shape)


def token_cache_key(corpus_fingerprint: str, tokenizer: PreTrainedTokenizerBase, split: str) -> str:
    """The token cache's key of one split of a corpus under a tokenizer."""
    return f"{corpus_fingerprint[:24]}-{tokenizer_fingerprint(tokenizer)[:24]}-{split}"


def load_packed(
    corpus: Corpus, tokenizer: PreTrainedTokenizerBase, seq_len: int, split: str
) -> torch.LongTensor:
    """Packed rows ``[M, seq_len + 1]`` of one split of ``corpus`` (token array cached)."""
    key = token_cache_key(corpus.fingerprint, tokenizer, split)
    ids = tokenize_split(corpus.split(split), tokenizer, cache_key=key)  # [N]
    return pack_tokens(ids, seq_len, what=f"{corpus.name} ({split} split)")


def count_tokens(docs: list[Document], tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """Tokens per source of ``docs`` as :func:`tokenize_split` streams them (each document's
    tokens plus its end-of-text id)."""
    backend = _plain_backend(tokenizer)
    counts: dict[str, int] = {}
    for start in range(0, len(docs), BATCH_DOCS):
        batch = docs[start : start + BATCH_DOCS]
        for doc, enc in zip(batch, backend.encode_batch_fast([d.text for d in batch], add_special_tokens=False)):
            counts[doc.source] = counts.get(doc.source, 0) + len(enc.ids) + 1
    return counts
