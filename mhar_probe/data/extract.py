"""Plain text out of the formats the study corpus's packages ship (no network, no state).

Every function takes bytes or text of one file and returns plain text (paragraphs separated
by one blank line) or a list of entries; markup is stripped, nothing is rewritten otherwise.

* HTML -> text: the stdlib ``html.parser``; ``<script>``/``<style>``/``<nav>``-like chrome is
  dropped, block elements end a paragraph, ``<pre>`` keeps its lines.
* POD (Perl) -> text: command paragraphs become headings, ``X<...>`` index entries go,
  formatting codes ``B<...>`` ``C<...>`` ``L<...>`` keep their text.
* dictd ``.dict`` + ``.index`` -> one entry per distinct (offset, length) in the index,
  the ``00-database-*`` headers left out.
* Brown corpus ``word/tag`` tokens -> words (tags removed, ``\\`\\``/``''`` -> ``"``).
* SWORD OSIS (zText) -> verses' text, one paragraph per ``x-p`` paragraph, notes removed.
* WordNet ``data.*`` lines -> ``lemma, lemma: gloss``.
* fortune files (entries between ``%`` lines) -> entries.
* Project Gutenberg header/footer -> removed (between the ``*** START``/``*** END`` lines).
* R lazy-load databases (``.rdb``) -> the character vectors they hold, one element a line.
"""

from __future__ import annotations

import re
import struct
import zlib
from html.parser import HTMLParser

#: HTML elements whose content is page chrome or script, never prose
SKIP_TAGS = frozenset({"script", "style", "head", "nav", "noscript", "svg", "math", "button", "form"})
#: HTML elements that end a paragraph
BLOCK_TAGS = frozenset({"p", "div", "section", "article", "li", "ul", "ol", "dl", "dt", "dd", "table", "tr",
                        "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "br", "hr", "td", "th",
                        "header", "footer", "figure", "figcaption", "caption", "body", "tbody", "thead"})


def tidy(text: str) -> str:
    """Unix newlines, no trailing spaces, at most one blank line between paragraphs, stripped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\xa0", " ")
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


class _HTMLText(HTMLParser):
    """Collects the visible text of a page; see :func:`html_to_text`."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIP_TAGS:
            self.skip += 1
        elif tag == "pre":
            self.pre += 1
            self.parts.append("\n\n")
        elif tag in BLOCK_TAGS:
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "hr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            self.parts.append("\n\n")
        elif tag in BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.pre:
            self.parts.append(data)
        else:
            self.parts.append(re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    """The visible text of an HTML page: paragraphs at block elements, ``<pre>`` lines kept."""
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    paragraphs = []
    for para in re.split(r"\n\s*\n", text):
        if "\n" in para.strip("\n"):  # a <pre> block: keep its lines
            paragraphs.append(para.strip("\n"))
        else:
            para = " ".join(para.split())
            if para:
                paragraphs.append(para)
    return tidy("\n\n".join(paragraphs))


_POD_CODE = re.compile(r"[A-Z]<<+\s+(.*?)\s+>>+|[A-Z]<([^<>]*)>", re.S)


def _pod_inline(text: str) -> str:
    """Remove POD formatting codes, innermost first: ``X<..>``/``Z<>`` vanish, ``L<text|target>`` -> text."""
    def sub(m: re.Match[str]) -> str:
        code = m.group(0)[0]
        inner = m.group(1) if m.group(1) is not None else m.group(2)
        if code in "XZ":
            return ""
        if code == "L":
            return inner.split("|", 1)[0] if "|" in inner else inner.split("/", 1)[-1].strip('"')
        if code == "E":
            return {"lt": "<", "gt": ">", "verbar": "|", "sol": "/"}.get(inner, "")
        return inner

    for _ in range(6):  # nested codes
        new = _POD_CODE.sub(sub, text)
        if new == text:
            break
        text = new
    return text


def pod_to_text(pod: str) -> str:
    """Plain text of a POD document: ``=head`` -> heading line, ``=item`` -> item, other commands
    dropped, ``=begin``/``=for`` blocks and everything after ``=cut`` until the next command left out."""
    out: list[str] = []
    in_pod = True
    skip_block = False
    for para in re.split(r"\n\s*\n", pod.replace("\r\n", "\n")):
        if para.startswith("="):
            command, _, rest = para.partition(" ")
            command = command.split("\n")[0]
            in_pod = command != "=cut"
            if command == "=begin":
                skip_block = True
            elif command == "=end":
                skip_block = False
            elif command.startswith("=head") or command == "=item":
                heading = _pod_inline(rest.strip())
                if heading and heading != "*":
                    out.append(heading)
            continue
        if not in_pod or skip_block:
            continue
        if para[:1] in (" ", "\t"):  # verbatim
            out.append(para.rstrip())
        else:
            out.append(" ".join(_pod_inline(para).split()))
    return tidy("\n\n".join(p for p in out if p.strip()))


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def dict_b64(text: str) -> int:
    """A dictd index number (base 64, most significant digit first)."""
    value = 0
    for ch in text:
        value = value * 64 + _B64.index(ch)
    return value


def dict_entries(index: str, data: bytes) -> list[str]:
    """The entries of a dictd database: one per distinct (offset, length) of ``index``, in
    offset order, ``00-database-*`` (the database's own description) left out."""
    spans: set[tuple[int, int]] = set()
    for line in index.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        spans.add((dict_b64(parts[1]), dict_b64(parts[2])))
    entries = []
    for start, length in sorted(spans):
        text = tidy(data[start:start + length].decode("utf-8", errors="replace"))
        if text:
            entries.append(text)
    return entries


_BROWN_TOKEN = re.compile(r"(\S+)/[^\s/]+")


def brown_to_text(raw: str) -> str:
    """Words of a Brown corpus file (``word/tag`` tokens); a tab-indented line starts a paragraph
    in the source and is one sentence, so sentences are joined into paragraphs at indents."""
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", raw):
        words = _BROWN_TOKEN.findall(block)
        if not words:
            continue
        sentence = " ".join(words)
        sentence = sentence.replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
        sentence = re.sub(r" ([.,;:?!)'])", r"\1", sentence)
        sentence = re.sub(r"([(]) ", r"\1", sentence)
        paragraphs.append(sentence)
    return tidy("\n\n".join(paragraphs))


def osis_to_text(osis: str) -> str:
    """Text of SWORD OSIS markup: notes and titles' markup removed (titles kept as lines),
    a paragraph at every ``x-p`` paragraph start and chapter."""
    osis = re.sub(r"<note\b.*?</note>", "", osis, flags=re.S)
    osis = re.sub(r'<div [^>]*type="x-p"[^>]*sID="[^"]*"[^>]*/>|<div [^>]*sID="[^"]*"[^>]*type="x-p"[^>]*/>',
                  "\n\n", osis)
    osis = re.sub(r"<chapter [^>]*sID=[^>]*/>", "\n\n", osis)
    osis = re.sub(r"<title\b[^>]*>", "\n\n", osis)
    osis = re.sub(r"</title>", "\n\n", osis)
    osis = re.sub(r"<lb\b[^>]*/>", "\n", osis)
    text = re.sub(r"<[^>]+>", "", osis)
    text = text.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return tidy("\n\n".join(p for p in paragraphs if p))


def wordnet_glosses(data: str) -> list[str]:
    """``lemma, lemma: gloss`` per synset line of a WordNet ``data.*`` file (licence header skipped)."""
    out = []
    for line in data.splitlines():
        if not line or line.startswith(" ") or "|" not in line:
            continue
        head, gloss = line.split("|", 1)
        fields = head.split()
        try:
            n_words = int(fields[3], 16)
        except (IndexError, ValueError):
            continue
        lemmas = [fields[4 + 2 * k].replace("_", " ") for k in range(n_words)]
        lemmas = [re.sub(r"\([a-z]+\)$", "", w) for w in lemmas]
        out.append(f"{', '.join(lemmas)}: {gloss.strip()}")
    return out


def fortune_entries(raw: str) -> list[str]:
    """The entries of a fortune file (separated by lines holding only ``%``)."""
    entries = [tidy(e) for e in re.split(r"^%\s*$", raw, flags=re.M)]
    return [e for e in entries if e]


_PG_START = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)
_PG_END = re.compile(r"^\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)


def strip_gutenberg(text: str) -> str:
    """A Project Gutenberg text without its licence header and footer (if it has them)."""
    start = _PG_START.search(text)
    if start:
        text = text[start.end():]
    end = _PG_END.search(text)
    if end:
        text = text[:end.start()]
    return tidy(text)


def _r_strings(buf: bytes) -> list[str]:
    """The elements of a serialized R character vector (XDR format ``X\\n``), else []."""
    if not buf.startswith(b"X\n"):
        return []
    pos = 2
    version = struct.unpack(">i", buf[pos:pos + 4])[0]
    pos += 12
    if version == 3:
        (nelen,) = struct.unpack(">i", buf[pos:pos + 4])
        pos += 4 + nelen
    (flags,) = struct.unpack(">i", buf[pos:pos + 4])
    pos += 4
    if flags & 0xFF != 16:  # STRSXP
        return []
    (length,) = struct.unpack(">i", buf[pos:pos + 4])
    pos += 4
    out = []
    for _ in range(length):
        flags, n = struct.unpack(">ii", buf[pos:pos + 8])
        pos += 8
        if flags & 0xFF != 9:
            return []
        if n < 0:  # NA_character_
            out.append("")
            continue
        out.append(buf[pos:pos + n].decode("utf-8", errors="replace"))
        pos += n
    return out


def r_lazyload_vectors(rdb: bytes) -> list[list[str]]:
    """Every character vector in an R lazy-load database (blobs of a 4-byte length + zlib data)."""
    vectors: list[list[str]] = []
    pos = 0
    while pos + 4 < len(rdb):
        d = zlib.decompressobj()
        try:
            blob = d.decompress(rdb[pos + 4:])
        except zlib.error:
            break
        used = len(rdb) - pos - 4 - len(d.unused_data)
        pos += 4 + used
        strings = _r_strings(blob)
        if strings:
            vectors.append(strings)
    return vectors
