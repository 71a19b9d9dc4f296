"""Data layer: corpora (embedded stdlib/pydoc text or the user's files), a byte-level BPE
tokenizer trained and cached per corpus, and packing into fixed-length training rows.

Typical use::

    corpus = load_corpus()                      # or load_corpus("data/my.jsonl")
    tok = get_tokenizer(corpus, vocab_size=4096)
    train = load_packed(corpus, tok, seq_len=256, split="train")   # [M, 257]
"""

from .cache import cache_root
from .corpus import Composition, CompositionRow, Corpus
from .document import Document
from .embedded import PROSE_SOURCES
from .errors import DataError
from .load import load_corpus, load_run_corpus, resolve_cap
from .packing import document_index, load_packed, pack_tokens, tokenize_split
from .tokenizer import EOS_TOKEN, get_tokenizer, load_tokenizer, tokenizer_fingerprint

__all__ = [
    "EOS_TOKEN",
    "document_index",
    "PROSE_SOURCES",
    "Composition",
    "CompositionRow",
    "Corpus",
    "DataError",
    "Document",
    "cache_root",
    "get_tokenizer",
    "load_corpus",
    "load_run_corpus",
    "resolve_cap",
    "load_packed",
    "load_tokenizer",
    "pack_tokens",
    "tokenize_split",
    "tokenizer_fingerprint",
]
