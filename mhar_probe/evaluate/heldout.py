"""Offline harness tasks built from a run's held-out (validation) documents.

Three tasks are shipped, all read by the LM Evaluation Harness from local jsonl files
(`dataset_path: json` + `data_files`), so nothing is downloaded:

``mhar_heldout_ppl``
    The paper's WikiText-2 column on our own held-out text: `loglikelihood_rolling` over
    every validation document, reported as word perplexity, byte perplexity and bits per
    byte (the harness's default `process_results` for rolling log-likelihoods, exactly as
    its `wikitext` task, minus the wikitext detokenizer). Long documents are cut at line
    boundaries into pieces of at most `PPL_CHUNK_CHARS` characters, so `--limit` bounds
    the work; the weighted perplexity aggregation makes the cut nearly irrelevant since the
    harness scores rolling windows of the model's context length anyway.
``mhar_lastword``
    LAMBADA-style last-word prediction (`output_type: loglikelihood`, metrics `acc`, the
    greedy-decoding correctness of the whole word, and `perplexity`, as the harness's
    `lambada_openai`). A passage ends in a target word that is a plain identifier/word of
    at least three characters, is preceded by a space, is not a stop word or Python keyword,
    and already occurs earlier in the passage: LAMBADA's "predictable from the wider
    context" criterion, approximated by a copy. Contexts are at most `LW_CONTEXT_CHARS`
    characters starting at a line start, at least `LW_MIN_WORDS` words long, and do not
    overlap within a document.
``mhar_nextline``
    Two-way next-line choice (`output_type: multiple_choice`, metrics `acc`, `acc_norm`):
    given up to `NL_CONTEXT_LINES` preceding lines of a held-out document, which of two lines
    comes next -- the real one, or a line of similar length from another held-out document
    of the same source. Every item is a binary choice, so even models too small to get a
    last word right give two arms that disagree on some items, and a paired McNemar test
    has discordant pairs to count (chance is 0.5; the demo's 150-step tiny models sit near it).
``mhar_nextline_gen``
    The same contexts as a generation task (`output_type: generate_until`, metric
    `exact_match`): the model writes the next line by greedy decoding, stopped at the first
    newline or after `NLG_MAX_TOKENS` tokens, and scores when it equals the real line. It
    runs `generate()` with a KV cache on left-padded batches, the path every generating
    user takes.

Where the items come from (`mhar_lastword`, `mhar_nextline`, `mhar_nextline_gen`):

* the body of each document: up to `LW_MAX_PER_DOC` / `NL_MAX_PER_DOC` positions a document,
  drawn from the whole body by a generator seeded from `ITEM_SEED` and the document's text,
  never from the leading comment block (`body_start`), so a file's licence header does not
  become its item;
* no context (or next line) is boilerplate: `is_boilerplate` refuses licence, copyright,
  shebang, coding-cookie, author-metadata and generated-file text (`BOILERPLATE_PATTERNS`), and
  from item set 7 on `is_navigation` refuses a manual's navigation bar ("Prev / Up / Home / Next"),
  which repeats on every page: the 100M study's item set 6 holds 12 such `mhar_lastword` and 51
  such `mhar_nextline` contexts, and `mhar_nextline` 995 distinct contexts in 1,000 items. Its
  corpus keeps set 6 (`COMMITTED_ITEM_SETS`) so that new runs pair with the committed evaluations;
  every other corpus gets set 7;
* every item is distinct: documents with identical text are read once, and a repeated
  (context, target) pair is kept only the first time.

Items are ordered round-robin across documents, the documents in an order drawn from the seed,
so the first N items that `--limit N` keeps are one body position from each of N documents
of every source. The builder is deterministic: the same corpus (fingerprint) and seed always
give byte-identical files, so two runs trained on the same corpus are evaluated on the same
items and their samples files pair by hash.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
from dataclasses import dataclass
from collections import deque
from itertools import zip_longest
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ..atomic import build_dir
from ..data.cache import cache_subdir
from ..data.document import Document

#: bump when the item selection or the YAMLs change (part of the cache key). 7 refuses navigation
#: boilerplate (`is_navigation`) as well; 6 is kept, item for item, for the committed evaluations
BUILDER_VERSION = 7
ITEM_VERSIONS = (6, 7)
#: corpora whose committed evaluations used an older item set, by fingerprint prefix (20 hex): new
#: runs on them are evaluated on the same items, so their samples pair with the committed ones.
#: f9930c47...: the 100M study's corpus (results/study100m and its parts, item set 6)
COMMITTED_ITEM_SETS = {"f9930c4756897dd484a4": 6}
#: the default seed of the item positions (part of the cache key)
ITEM_SEED = 0
PPL_TASK = "mhar_heldout_ppl"
LASTWORD_TASK = "mhar_lastword"
NEXTLINE_TASK = "mhar_nextline"
NEXTLINE_GEN_TASK = "mhar_nextline_gen"
SHIPPED_TASKS = (PPL_TASK, LASTWORD_TASK, NEXTLINE_TASK, NEXTLINE_GEN_TASK)

PPL_CHUNK_CHARS = 4000
LW_CONTEXT_CHARS = 600
LW_MIN_WORDS = 20
LW_MAX_PER_DOC = 40
LW_MAX_ITEMS = 2000
NL_CONTEXT_LINES = 4
NL_LINE_CHARS = (8, 80)  # target and distractor lengths (stripped)
NL_MAX_PER_DOC = 30
NL_MAX_ITEMS = 2000
NLG_MAX_TOKENS = 24  # generated tokens per item at most (a line is at most 80 characters)

_WORD = re.compile(r"(?<= )[A-Za-z_][A-Za-z0-9_]{2,}\b")
_STOP = frozenset(
    "the and for are but not you all any can had her was one our out has his how its may new now "
    "see way who did get let put say she too use that with this from they will have been were what "
    "when which their there then than them these those into also only some such more most other "
    "each must should would could about after before over under between through while where self cls "
    "none true false".split()
) | frozenset(k.lower() for k in keyword.kwlist)


# ----------------------------------------------------------------------------- boilerplate
#: what marks a text as licence, copyright or file-header boilerplate (matched case-insensitively;
#: `^` is a line start): one named pattern per kind, so a test can show each one firing
BOILERPLATE_PATTERNS: dict[str, str] = {
    "copyright": r"copyright|\(c\)\s*(?:19|20)\d\d|\N{COPYRIGHT SIGN}|all rights reserved",
    "licence": r"licen[cs]|spdx|permission is hereby granted|warrant(?:y|ies)|redistribut|liabilit"
               r"|free software foundation|\bgnu\b",
    "shebang": r"^\s*#!",
    "coding cookie": r"-\*-.*-\*-|\bcoding[:=]\s*[-\w.]+|^\s*(?:#|//)\s*vim?:",
    "author metadata": r"__(?:author|copyright|license|credits|maintainer|email|status)__|@author\b"
                       r"|^\s*(?:author|maintainer|author-email|maintainer-email|home-?page|metadata-version"
                       r"|classifier|requires-dist)\s*:",
    "generated file": r"auto-?generated|generated by|do not edit",
}
_BOILERPLATE = re.compile("|".join(f"(?:{p})" for p in BOILERPLATE_PATTERNS.values()), re.I | re.M)
#: lower-case words one of which every match of `BOILERPLATE_PATTERNS` contains: a text without
#: any of them is not boilerplate, which spares the (slow) regular expression on most text
_BOILERPLATE_WORDS = ("copyright", "(c)", "\N{COPYRIGHT SIGN}", "rights reserved", "licen", "spdx", "permission",
                      "warrant", "redistribut", "liabilit", "free software", "gnu", "#!", "-*-", "coding", "vi:",
                      "vim:", "author", "__copyright__", "__credits__", "__maintainer__", "__email__", "__status__",
                      "maintainer", "home-page", "homepage", "metadata-version", "classifier", "requires-dist",
                      "generated", "do not edit")
#: a line that can open a file without being its body: blank, or a comment
_HEADER_LINE = re.compile(r"^\s*(?:$|#|//|/\*|\*|--|;|%|\.\.\s)")


#: a line of a manual's navigation bar (the HTML manuals' "Prev / Up / Home / Next" links)
_NAVIGATION_LINE = re.compile(r"^\s*(?:prev(?:ious)?|next|up|home|top|contents|table of contents|index|search|back)"
                              r"\s*$", re.I)


def is_navigation(text: str) -> bool:
    """True when at least half the non-blank lines of `text` are navigation links (Prev, Next, Up,
    Home, Contents, ...): a passage that repeats on every page of a manual, not text to read."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return bool(lines) and 2 * sum(bool(_NAVIGATION_LINE.match(ln)) for ln in lines) >= len(lines)


def item_version(fingerprint: str) -> int:
    """The item-set version a corpus's tasks are built with: the committed one where its
    evaluations are committed (`COMMITTED_ITEM_SETS`), else `BUILDER_VERSION`."""
    return COMMITTED_ITEM_SETS.get(fingerprint[:20], BUILDER_VERSION)


def _refused(text: str, version: int) -> bool:
    """Whether item-set `version` refuses `text` as a context or line (boilerplate; from 7 on,
    navigation too)."""
    return is_boilerplate(text) or (version >= 7 and is_navigation(text))


def is_boilerplate(text: str) -> bool:
    """True when `text` holds licence, copyright or file-header text (any `BOILERPLATE_PATTERNS`):
    such a passage tests whether a model memorised a licence, not whether it reads its context."""
    low = text.lower()
    return any(w in low for w in _BOILERPLATE_WORDS) and _BOILERPLATE.search(text) is not None


def _body_lines(text: str) -> tuple[int, list[str]]:
    """(index of the first body line, the lines without trailing white space): the body starts
    at the first line that is not blank and not a comment, i.e. after the leading header block."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    first = next((i for i, ln in enumerate(lines) if not _HEADER_LINE.match(ln)), len(lines))
    return first, lines


def body_start(text: str) -> int:
    """Character offset of the document's body: the start of the first line that is neither
    blank nor a comment (the leading comment block of a file holds its licence and header)."""
    pos = 0
    for line in text.splitlines(keepends=True):
        if not _HEADER_LINE.match(line.rstrip("\r\n")):
            return pos
        pos += len(line)
    return pos


@dataclass(frozen=True)
class TaskFiles:
    """A directory of materialised task YAMLs and data files, with their SHA-256s."""

    root: Path
    tasks: tuple[str, ...]
    sha256: dict[str, str]  # file name -> sha256
    counts: dict[str, int]  # task -> number of items


# ----------------------------------------------------------------------------- items
def ppl_items(docs: Iterable[Document], chunk_chars: int = PPL_CHUNK_CHARS) -> list[dict[str, Any]]:
    """Held-out documents cut at line boundaries into pieces of at most `chunk_chars`."""
    per_doc: list[list[dict[str, Any]]] = []
    for doc in sorted(docs, key=lambda d: d.id):
        pieces: list[str] = []
        cur = ""
        for line in doc.text.splitlines(keepends=True):
            while len(line) > chunk_chars:  # a single over-long line: hard cut
                if cur:
                    pieces.append(cur)
                    cur = ""
                pieces.append(line[:chunk_chars])
                line = line[chunk_chars:]
            if len(cur) + len(line) > chunk_chars and cur:
                pieces.append(cur)
                cur = ""
            cur += line
        if cur.strip():
            pieces.append(cur)
        per_doc.append([{"id": f"{doc.id}#{k}", "source": doc.source, "text": p}
                        for k, p in enumerate(pieces) if p.strip()])
    return _round_robin(per_doc)


def lastword_candidates(text: str, *, context_chars: int = LW_CONTEXT_CHARS,
                        min_words: int = LW_MIN_WORDS, max_items: int = LW_MAX_PER_DOC,
                        seed: int | None = None, version: int = BUILDER_VERSION) -> list[tuple[str, str]]:
    """(context, target) pairs from one text; `context + target` is a verbatim span of it.

    `target` starts with the single space that precedes the word (the harness's `lambada`
    convention: `doc_to_text` without the space, `doc_to_target` = " word").

    Candidates are found in text order, each context starting after the previous one's target
    (the contexts of one text do not overlap), never inside the document's header
    (`body_start`), and never boilerplate (`is_boilerplate`; from item set 7 on, nor navigation). With `seed=None` the first
    `max_items` are returned; with a seed, `max_items` of them drawn from the whole body by
    `numpy.random.default_rng(seed)`, in the order drawn.
    """
    out: list[tuple[str, str]] = []
    start = body_start(text)
    floor = start  # contexts of one document do not overlap
    for m in _WORD.finditer(text, start + 1):
        word, pos = m.group(0), m.start()
        if word.lower() in _STOP:
            continue
        lo = max(floor, pos - 1 - context_chars)
        if lo > 0 and text[lo - 1] != "\n":
            nl = text.find("\n", lo, pos)
            if nl < 0:
                continue
            lo = nl + 1
        context = text[lo:pos - 1]
        if len(context.split()) < min_words or not re.search(rf"\b{re.escape(word)}\b", context) \
                or _refused(context, version):
            continue
        out.append((context, " " + word))
        floor = m.end()
        if seed is None and len(out) >= max_items:
            break
    if seed is None:
        return out
    pick = np.random.default_rng(seed).permutation(len(out))[:max_items]
    return [out[int(i)] for i in pick]


def lastword_items(docs: Iterable[Document], max_total: int = LW_MAX_ITEMS,
                   seed: int = ITEM_SEED, version: int = BUILDER_VERSION) -> list[dict[str, Any]]:
    """LAMBADA-style items from the body of every held-out document (positions drawn by `seed`),
    round-robin across documents in a seeded order, without duplicate (context, target) pairs."""
    per_doc = []
    for doc in _distinct_documents(docs, seed):
        cands = lastword_candidates(doc.text, seed=_stable_int(str(seed), "lastword", _text_key(doc.text)),
                                    version=version)
        per_doc.append([{"id": f"{doc.id}@{k}", "source": doc.source, "context": c, "target": t}
                        for k, (c, t) in enumerate(cands)])
    return _distinct(_round_robin(per_doc), ("context", "target"))[:max_total]


def _stable_int(*parts: str) -> int:
    return int(hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:12], 16)


class _LinePool:
    """The eligible lines of one source, sorted by (length, document id, line), with each
    length's entries as one numpy block, so that picking a distractor costs one block, not the
    whole pool (the held-out split of a large corpus has hundreds of thousands of lines)."""

    def __init__(self, entries: list[tuple[int, str, str]]) -> None:
        entries.sort()
        self.entries = entries
        self.by_len: dict[int, np.ndarray] = {}
        self.doc_of = np.array([e[1] for e in entries], dtype=object)
        for i, (length, _, _) in enumerate(entries):
            self.by_len.setdefault(length, []).append(i)  # type: ignore[arg-type]
        self.by_len = {n: np.asarray(ix, dtype=np.int64) for n, ix in self.by_len.items()}
        self.own: dict[str, np.ndarray] = {}
        for i, (_, doc_id, _) in enumerate(entries):
            self.own.setdefault(doc_id, []).append(i)  # type: ignore[arg-type]
        self.own = {d: np.asarray(ix, dtype=np.int64) for d, ix in self.own.items()}

    def others(self, doc_id: str) -> int:
        """How many entries belong to other documents."""
        return len(self.entries) - len(self.own.get(doc_id, ()))

    def distractor(self, doc_id: str, length: int, h: int) -> str:
        """The line of another document nearest in length to `length`; among the nearest, the
        one with the smallest `(k * 2654435761 + h) % 97`, then the smallest k, where k is its
        index in the pool without `doc_id`'s own lines (so the choice depends on the pool alone)."""
        own = self.own.get(doc_id, np.empty(0, dtype=np.int64))
        lengths = sorted(self.by_len)
        for delta in range(0, max(abs(lengths[0] - length), abs(lengths[-1] - length)) + 1):
            blocks = [self.by_len[n] for n in dict.fromkeys((length - delta, length + delta)) if n in self.by_len]
            if not blocks:
                continue
            p = np.concatenate(blocks)  # [c] pool indices, ascending
            p = p[self.doc_of[p] != doc_id]
            if p.size == 0:
                continue
            k = p - np.searchsorted(own, p)  # index among the other documents' lines
            key = (k * 2654435761 + h) % 97
            return self.entries[int(p[np.lexsort((k, key))[0]])][2]
        raise AssertionError("others() > 0 guarantees a distractor")


def nextline_items(docs: Iterable[Document], max_total: int = NL_MAX_ITEMS,
                   seed: int = ITEM_SEED, version: int = BUILDER_VERSION) -> list[dict[str, Any]]:
    """Two-way next-line items: context lines, [real next line, distractor] in a hashed order.

    Target lines are drawn from the body of each document in the order of a permutation from
    `seed` (at most `NL_MAX_PER_DOC` a document); the context is the `NL_CONTEXT_LINES` non-blank
    lines before the target, all in the body; no context or target is boilerplate (from item set 7
    on, nor navigation), and no
    (context, target) pair is repeated. The distractor is an eligible, non-boilerplate body line
    of another document of the same source whose length is closest to the real line's (ties
    broken by a hash), so length alone gives no answer.
    """
    lo, hi = NL_LINE_CHARS
    docs = _distinct_documents(docs, seed)
    eligible = lambda ln: lo < len(ln.strip()) <= hi and not _refused(ln, version)  # noqa: E731
    bodies = {doc.id: _body_lines(doc.text) for doc in docs}  # (first body line, lines)
    entries: dict[str, list[tuple[int, str, str]]] = {}  # source -> (length, doc id, line)
    for doc in docs:
        first, lines = bodies[doc.id]
        for ln in lines[first:]:
            if eligible(ln):
                entries.setdefault(doc.source, []).append((len(ln), doc.id, ln))
    pools = {src: _LinePool(e) for src, e in entries.items()}
    per_doc = []
    for doc in docs:
        first, lines = bodies[doc.id]
        pool = pools.get(doc.source)
        items: list[dict[str, Any]] = []
        if pool is None or not pool.others(doc.id):
            per_doc.append(items)
            continue
        filled = np.flatnonzero([bool(ln.strip()) for ln in lines])  # non-blank line numbers, ascending
        rng = np.random.default_rng(_stable_int(str(seed), "nextline", _text_key(doc.text)))
        for i in (first + rng.permutation(max(0, len(lines) - first))).tolist():
            if len(items) >= NL_MAX_PER_DOC:
                break
            target = lines[i]
            k = int(np.searchsorted(filled, i))  # non-blank lines before line i: filled[:k]
            ctx_rows = filled[max(0, k - NL_CONTEXT_LINES):k]
            ctx_rows = ctx_rows[ctx_rows >= first]
            if not eligible(target) or ctx_rows.size == 0:
                continue
            context = "\n".join(lines[j] for j in ctx_rows.tolist())
            if _refused(context, version):
                continue
            h = _stable_int(doc.id, str(i))
            wrong = pool.distractor(doc.id, len(target), h)
            if wrong.strip() == target.strip():
                continue
            label = h % 2
            choices = [target, wrong] if label == 0 else [wrong, target]
            items.append({"id": f"{doc.id}^{i}", "source": doc.source, "context": context,
                          "choices": choices, "label": label})
        per_doc.append(items)
    rows = _round_robin(per_doc)
    return _distinct(rows, lambda it: (it["context"], it["choices"][it["label"]]))[:max_total]


def nextline_gen_items(docs: Iterable[Document], max_total: int = NL_MAX_ITEMS,
                       seed: int = ITEM_SEED, version: int = BUILDER_VERSION) -> list[dict[str, Any]]:
    """The next-line items as generation items: the context lines and the real next line (with its
    indentation; trailing white space removed)."""
    return [{"id": it["id"], "source": it["source"], "context": it["context"],
             "target": it["choices"][it["label"]]} for it in nextline_items(docs, max_total, seed, version)]


def _round_robin(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [x for row in zip_longest(*groups) for x in row if x is not None]


def _distinct(rows: list[dict[str, Any]], key: Any) -> list[dict[str, Any]]:
    """`rows` without repeats: the first row of each key (a tuple of field names, or a function
    of the row) is kept, in order."""
    get = key if callable(key) else (lambda r: tuple(r[k] for k in key))
    seen: set[Any] = set()
    out = []
    for r in rows:
        k = get(r)
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def _text_key(text: str) -> str:
    """A document's content hash: identical texts (vendored copies) draw identical positions."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _distinct_documents(docs: Iterable[Document], seed: int) -> list[Document]:
    """The documents with distinct texts (the first by id of each text), in an order drawn from
    `seed` (a hash of the id), so that the first items of the round-robin mix every source."""
    seen: set[str] = set()
    out = []
    for doc in sorted(docs, key=lambda d: d.id):
        key = _text_key(doc.text)
        if key not in seen:
            seen.add(key)
            out.append(doc)
    return sorted(out, key=lambda d: (_stable_int(str(seed), "order", d.id), d.id))


# ----------------------------------------------------------------------------- YAMLs
def task_yaml(title: str, task: str, data_file: Path, body: str,
              metrics: list[tuple[str, str, bool]], version: int = BUILDER_VERSION) -> str:
    """A harness task YAML over one local jsonl file; `metrics` are (name, aggregation, higher_is_better)."""
    metric_list = "".join(f"  - metric: {m}\n    aggregation: {agg}\n    higher_is_better: {str(hib).lower()}\n"
                          for m, agg, hib in metrics)
    return (f"# {title} (built by mhar eval).\ntask: {task}\ndataset_path: json\ndataset_kwargs:\n"
            f"  data_files:\n    test: {json.dumps(str(data_file))}\n{body}test_split: test\n"
            f"metric_list:\n{metric_list}metadata:\n  version: {version}.0\n")


def ppl_yaml(data_file: Path, version: int = BUILDER_VERSION) -> str:
    return task_yaml("Held-out perplexity on the training corpus's validation split", PPL_TASK, data_file,
                     'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n',
                     [("word_perplexity", "weighted_perplexity", False),
                      ("byte_perplexity", "weighted_perplexity", False),
                      ("bits_per_byte", "bits_per_byte", False)], version)


def lastword_yaml(data_file: Path, version: int = BUILDER_VERSION) -> str:
    return task_yaml("LAMBADA-style last-word prediction on held-out text", LASTWORD_TASK, data_file,
                     'output_type: loglikelihood\ndoc_to_text: "{{context}}"\ndoc_to_target: "{{target}}"\n',
                     [("perplexity", "perplexity", False), ("acc", "mean", True)], version)


def nextline_yaml(data_file: Path, version: int = BUILDER_VERSION) -> str:
    return task_yaml("Two-way next-line choice on held-out text", NEXTLINE_TASK, data_file,
                     'output_type: multiple_choice\ndoc_to_text: "{{context}}\\n"\ndoc_to_target: label\n'
                     'doc_to_choice: "{{choices}}"\ntarget_delimiter: ""\n',
                     [("acc", "mean", True), ("acc_norm", "mean", True)], version)


def nextline_gen_yaml(data_file: Path, version: int = BUILDER_VERSION) -> str:
    return task_yaml("Next-line generation on held-out text (greedy, until a newline)", NEXTLINE_GEN_TASK,
                     data_file,
                     'output_type: generate_until\ndoc_to_text: "{{context}}\\n"\ndoc_to_target: "{{target}}"\n'
                     'generation_kwargs:\n  until: ["\\n"]\n  do_sample: false\n'
                     f'  max_gen_toks: {NLG_MAX_TOKENS}\n',
                     [("exact_match", "mean", True)], version)


# ----------------------------------------------------------------------------- files
def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def write_heldout_tasks(val: list[Document], root: Path, data_root: Path | None = None,
                        seed: int = ITEM_SEED, version: int = BUILDER_VERSION) -> dict[str, int]:
    """Write every shipped task's data files and YAMLs into `root` (which must exist).

    The YAMLs name their data files under `data_root` (default `root`): the directory's
    final place when `root` is a temporary name for it. `seed` draws the items' positions;
    `version` is the item set (`ITEM_VERSIONS`).
    """
    if version not in ITEM_VERSIONS:
        raise ValueError(f"item set version {version} is not one of {ITEM_VERSIONS}")
    items = {PPL_TASK: ppl_items(val), LASTWORD_TASK: lastword_items(val, seed=seed, version=version),
             NEXTLINE_TASK: nextline_items(val, seed=seed, version=version),
             NEXTLINE_GEN_TASK: nextline_gen_items(val, seed=seed, version=version)}
    yamls = {PPL_TASK: ppl_yaml, LASTWORD_TASK: lastword_yaml, NEXTLINE_TASK: nextline_yaml,
             NEXTLINE_GEN_TASK: nextline_gen_yaml}
    for task, rows in items.items():
        data = root / f"{task}.jsonl"
        data.write_text(_jsonl(rows), encoding="utf-8")
        (root / f"{task}.yaml").write_text(yamls[task]((data_root or root) / data.name, version), encoding="utf-8")
    return {t: len(r) for t, r in items.items()}


def sha256_file(path: Path, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def heldout_tasks(val: list[Document], fingerprint: str, seed: int = ITEM_SEED,
                  version: int | None = None) -> TaskFiles:
    """The shipped tasks for a corpus, materialised once in `<cache>/eval_tasks/<key>/`.

    `fingerprint` is the corpus fingerprint (`Corpus.fingerprint`); the cache key also
    holds the item-set `version` (default `item_version(fingerprint)`: a corpus with committed
    evaluations keeps their item set) and the item `seed`. YAMLs name their data files by absolute path: the directory is
    filled under a temporary name with YAMLs that already point at the final path, then
    renamed atomically.
    """
    version = item_version(fingerprint) if version is None else version
    final = cache_subdir("eval_tasks") / f"v{version}-s{seed}-{fingerprint[:20]}"
    if not (final / "counts.json").exists():
        def fill(tmp: Path) -> None:
            counts = write_heldout_tasks(val, tmp, data_root=final, seed=seed, version=version)
            (tmp / "counts.json").write_text(json.dumps(counts, sort_keys=True) + "\n", encoding="utf-8")
        build_dir(final, fill)  # the first writer wins
    counts = json.loads((final / "counts.json").read_text(encoding="utf-8"))
    sha = {p.name: sha256_file(p) for p in sorted(final.iterdir()) if p.suffix in (".jsonl", ".yaml")}
    return TaskFiles(root=final, tasks=SHIPPED_TASKS, sha256=sha, counts=counts)
