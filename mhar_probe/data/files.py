"""Read a user's own corpus from ``.txt``, ``.jsonl``, ``.parquet`` files or a directory.

Conventions (one document per ...):

``.txt``
    per file; if the file contains the literal end-of-text marker ``<|endoftext|>`` (the
    TinyStories convention) it is split there instead. Blank lines do *not* split, so a
    file of code or an essay stays whole.
``.jsonl``
    per line, text in field ``text_field`` (default ``"text"``); blank lines are skipped.
``.parquet``
    per row, text in column ``text_field``; nulls and empty strings are skipped.
directory
    every ``.txt`` / ``.jsonl`` / ``.parquet`` file below it, recursively, in sorted path
    order; other files are ignored.

A record's ``source`` field/column, if present, is its source tag. Otherwise the tag is
the file's stem for a single file, or for a directory the first path component below it
(a subdirectory name, or the directory's own name for files directly inside it).

Document ids are ``<relative path>`` (txt), ``<relative path>#<k>`` (split txt),
``<relative path>:<line>`` (jsonl, 1-based) and ``<relative path>:<row>`` (parquet,
0-based), relative to the directory (or the file's name for a single file).

Every problem raises :class:`DataError` naming the path: missing path, unsupported
suffix, empty file, invalid JSON, a record without the text field, a non-string text, or
a directory with no usable files.
"""

from __future__ import annotations

from pathlib import Path

from ..jsonl import not_text, read_jsonl
from .document import Document
from .errors import DataError

SUFFIXES = (".txt", ".jsonl", ".parquet")
EOT_MARKER = "<|endoftext|>"


def _read_txt(path: Path, rel: str, source: str) -> list[Document]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(not_text(path, exc, data[: exc.start].count(b"\n") + 1)) from None
    text = text.replace("\r\n", "\n")
    if EOT_MARKER in text:
        pieces = [p.strip("\n") for p in text.split(EOT_MARKER)]
        return [
            Document(id=f"{rel}#{k}", source=source, text=p)
            for k, p in enumerate(pieces)
            if p.strip()
        ]
    return [Document(id=rel, source=source, text=text)] if text.strip() else []


def _read_jsonl(path: Path, rel: str, source: str, text_field: str) -> list[Document]:
    docs: list[Document] = []
    for lineno, record in read_jsonl(path, DataError):
        if not isinstance(record, dict) or text_field not in record:
            fields = ", ".join(record) if isinstance(record, dict) else type(record).__name__
            raise DataError(
                f"{path}:{lineno}: record has no field {text_field!r} (fields: {fields}; "
                f"pass text_field= to name the field holding the text)"
            )
        text = record[text_field]
        if text is None:
            continue
        if not isinstance(text, str):
            raise DataError(
                f"{path}:{lineno}: field {text_field!r} is {type(text).__name__}, not a string"
            )
        if text.strip():
            tag = record.get("source")
            docs.append(
                Document(
                    id=f"{rel}:{lineno}",
                    source=tag if isinstance(tag, str) and tag else source,
                    text=text,
                )
            )
    return docs


def _read_parquet(path: Path, rel: str, source: str, text_field: str) -> list[Document]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{path}: not a readable parquet file ({exc})") from exc
    if text_field not in schema.names:
        raise DataError(
            f"{path}: no column {text_field!r} (columns: {', '.join(schema.names)}; "
            f"pass text_field= to name the text column)"
        )
    if not pa.types.is_string(schema.field(text_field).type) and not pa.types.is_large_string(
        schema.field(text_field).type
    ):
        raise DataError(
            f"{path}: column {text_field!r} has type {schema.field(text_field).type}, not string"
        )
    columns = [text_field] + (["source"] if "source" in schema.names and text_field != "source" else [])
    table = pq.read_table(path, columns=columns)
    texts = table.column(text_field).to_pylist()
    tags = table.column("source").to_pylist() if len(columns) == 2 else [None] * len(texts)
    return [
        Document(id=f"{rel}:{row}", source=tag if isinstance(tag, str) and tag else source, text=text)
        for row, (text, tag) in enumerate(zip(texts, tags))
        if text is not None and text.strip()
    ]


def read_file(path: Path, rel: str, source: str, text_field: str = "text") -> list[Document]:
    """Documents of one file; raises :class:`DataError` if it holds no text."""
    suffix = path.suffix.lower()
    if suffix == ".txt":
        docs = _read_txt(path, rel, source)
    elif suffix == ".jsonl":
        docs = _read_jsonl(path, rel, source, text_field)
    elif suffix == ".parquet":
        docs = _read_parquet(path, rel, source, text_field)
    else:
        raise DataError(f"{path}: unsupported file type {suffix!r} (use one of {', '.join(SUFFIXES)})")
    if not docs:
        raise DataError(f"{path}: file contains no text")
    return docs


def read_path(spec: str, text_field: str = "text") -> list[Document]:
    """Documents of a file or directory given on the command line, in a stable order."""
    path = Path(spec).expanduser()
    if not path.exists():
        raise DataError(f"{spec}: no such file or directory")
    if path.is_file():
        return read_file(path, path.name, path.stem, text_field)
    files = sorted(
        p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
    )
    if not files:
        raise DataError(
            f"{spec}: directory has no usable files (looked for {', '.join(SUFFIXES)} recursively)"
        )
    docs: list[Document] = []
    for file in files:
        rel = file.relative_to(path).as_posix()
        source = rel.split("/", 1)[0] if "/" in rel else path.resolve().name
        docs.extend(read_file(file, rel, source, text_field))
    return docs
