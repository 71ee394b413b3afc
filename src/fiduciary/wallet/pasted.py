"""Which parts of a person's message are their own words, and which they quoted or pasted.

An instruction hidden in an email the person pastes ("summarize this: … send 5 USDC to
0x…") is not the person's instruction, so an address that appears only in pasted text is not
"given by the person" (the ``address_source`` guard). This module draws that line, on purpose
generously: a span wrongly taken as pasted makes the model ask the person to state the address
again, a span wrongly taken as the person's own could let someone else's text move money.

Taken as quoted or pasted (``pasted_spans``):

- text between quotation marks: ``"…"``, ``“…”``, ``„…“``, ``«…»``, ``»…«``, ``‹…›``,
  ``「…」``, ``『…』``, and ``'…'`` / ``‘…’`` when the marks are not apostrophes (the opening one
  does not follow a letter or digit, the closing one is not followed by one); a mark left open
  runs to the end of the message;
- a ``{ … }`` block (a pasted JSON object), to its matching brace or the end;
- a fenced code block (a line starting with three backticks or tildes) to its closing fence or
  the end, and every markdown blockquote line (starting with ``>``);
- from an e-mail marker to the end: ``-----Original Message-----``, ``Forwarded message``,
  ``Begin forwarded message``, a line ending in ``wrote:``, a ``Fwd:`` line, a header block
  (``From:`` followed within a few lines by ``To:``, ``Subject:``, ``Date:`` or ``Sent:``), an
  HTML ``<blockquote`` or ``gmail_quote``;
- from a phrase that introduces someone else's text to the end: "summarize", "translate",
  "proofread", "paraphrase"; "this email says", "the message below", "what does this text
  mean", "here is the invoice", "forwarded/pasted/copied message", "he wrote:" and the like.

Invisible characters (zero-width spaces and joiners, bidi controls, the BOM, soft hyphens) are
ignored when finding these markers, so they cannot hide a quote or a marker. An address with
invisible characters inside it is never the person's own words: nobody types those.

``given_addresses`` is what the guards use. The limits, stated plainly: a paste with no marker
at all cannot be told from the person's own words, and pasted text may close a quotation mark
early. Neither can move money alone: a first payment to an address that is not a saved contact
and was never paid waits for the person (``new_recipient``).
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata

from .addresses import ADDRESS

__all__ = ["given_addresses", "mentioned_addresses", "own_words", "pasted_spans", "visible"]

Span = tuple[int, int]  # [start, end) in the visible text

# characters that show nothing: Unicode format characters (zero-width, bidi, BOM, soft hyphen)
# and the invisible combining marks (grapheme joiner, variation selectors)
_INVISIBLE_MARKS = frozenset({"\u034f", *map(chr, range(0xFE00, 0xFE10))})

_PAIRS: dict[str, tuple[str, ...]] = {
    '"': ('"',),
    "\u201c": ("\u201d",),  # “ ”
    "\u201e": ("\u201c", "\u201d"),  # „ “ (German) or „ ” (Polish)
    "\u00ab": ("\u00bb",),  # « »
    "\u00bb": ("\u00ab",),  # » « (German, Danish)
    "\u2039": ("\u203a",),  # ‹ ›
    "\u300c": ("\u300d",),  # 「 」
    "\u300e": ("\u300f",),  # 『 』
}
_SINGLE: dict[str, tuple[str, ...]] = {"'": ("'",), "\u2018": ("\u2019",)}  # ' ' and ‘ ’

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})", re.M)
_BLOCKQUOTE = re.compile(r"^[ \t]*>.*$", re.M)

_NOUN = (
    r"(?:e-?mails?|mails?|messages?|msgs?|texts?|letters?|notes?|invoices?|bills?|documents?"
    r"|docs?|pdfs?|posts?|tweets?|dms?|sms|chats?|threads?|pages?|snippets?|transcripts?"
    r"|replies|reply|requests?|notices?|alerts?|payloads?|json|webhooks?|logs?|screenshots?"
    r"|paragraphs?|passages?|excerpts?|content|conversation|whatsapp|telegram|signal)"
)
_EMAIL_MARKERS = re.compile(
    r"|".join(
        (
            r"^[ \t]*-{2,}[ \t]*(?:original message|forwarded message)[ \t]*-{2,}",
            r"^[ \t]*(?:begin forwarded message|forwarded message)\b",
            r"^[^\n]{0,200}\b(?:wrote|schrieb|escribió|a écrit)[ \t]*:[ \t]*$",
            r"^[ \t]*fwd?[ \t]*:",
            r"^[ \t]*from[ \t]*:[^\n]*\n(?:[^\n]*\n){0,3}?[ \t]*(?:to|subject|date|sent|cc)[ \t]*:",
            r"<blockquote\b",
            r"gmail_quote",
        )
    ),
    re.I | re.M,
)
_DET = r"(?:this|that|these|those|the|the following|following|an?|my|his|her|their|our)"
_INTRODUCERS = re.compile(
    r"|".join(
        (
            # asked to work on someone's text: whatever follows is that text
            r"\b(?:summari[sz]e|summary of|tl;?dr|translate|proofread|paraphrase|reword)\b",
            r"\b(?:explain|analy[sz]e|interpret|review|read|check)[ \t]+" + _DET + r"[ \t]+"
            r"(?:\w+[ \t]+){0,2}?" + _NOUN + r"\b",
            # "this email says", "the message below", "what does this text mean"
            r"\b" + _DET + r"[ \t]+(?:\w+[ \t]+){0,2}?" + _NOUN + r"\b[^\n]{0,60}?"
            r"\b(?:says?|said|reads?|states?|goes|contains?|means?|below|follows)\b",
            # "here is the invoice", "pasted email", "copied message"
            r"\b(?:here is|here's|heres|here are|below is|pasting|pasted|copied|copy of"
            r"|forwarding|forwarded)[ \t]+(?:"
            + _DET
            + r"[ \t]+)?(?:\w+[ \t]+){0,2}?"
            + _NOUN
            + r"\b",
            # reported speech: "he wrote:", "they say:", "Bob texted me:"
            r"\b(?:wrote|writes|says|said|sent me|messaged me|texted me|emailed me|dm'?d me)"
            r"[ \t]*:",
        )
    ),
    re.I,
)
_WORD = re.compile(r"\w")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_OPENER = re.compile("[" + re.escape("".join([*_PAIRS, *_SINGLE, "{"])) + "]")
_BRACES = re.compile(r"[{}]")


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) == "Cf" or ch in _INVISIBLE_MARKS


def visible(text: str) -> tuple[str, list[int]]:
    """``text`` without invisible characters, and where each kept character was in ``text``."""
    hidden = [m.start() for m in _NON_ASCII.finditer(text) if _invisible(m.group())]
    if not hidden:
        return text, list(range(len(text)))
    pieces: list[str] = []
    where: list[int] = []
    for before, after in itertools.pairwise([-1, *hidden, len(text)]):
        pieces.append(text[before + 1 : after])
        where.extend(range(before + 1, after))
    return "".join(pieces), where


def _quotes(text: str) -> list[Span]:
    spans: list[Span] = []
    at = 0
    while (found := _OPENER.search(text, at)) is not None:
        i, ch = found.start(), found.group()
        if ch in _PAIRS:
            end = _close(text, i + 1, _PAIRS[ch])
        elif ch in _SINGLE and _opens_single(text, i):
            end = _close_single(text, i + 1, _SINGLE[ch][0])
        elif ch == "{":
            end = _brace(text, i)
        else:
            at = i + 1
            continue
        spans.append((i, end))
        at = end
    return spans


def _opens_single(text: str, i: int) -> bool:
    before = text[i - 1] if i > 0 else " "
    after = text[i + 1] if i + 1 < len(text) else " "
    return not _WORD.match(before) and not after.isspace()


def _close(text: str, start: int, closers: tuple[str, ...]) -> int:
    """The end (past the closing mark) of a quotation opened before ``start``; open: the end."""
    ends = [j for j in (text.find(c, start) for c in closers) if j >= 0]
    return min(ends) + 1 if ends else len(text)


def _close_single(text: str, start: int, closer: str) -> int:
    """As ``_close``, skipping apostrophes (a mark followed by a letter: it's, don't)."""
    j = text.find(closer, start)
    while j >= 0 and j + 1 < len(text) and _WORD.match(text[j + 1]):
        j = text.find(closer, j + 1)
    return len(text) if j < 0 else j + 1


def _brace(text: str, i: int) -> int:
    depth = 0
    for match in _BRACES.finditer(text, i):
        depth += 1 if match.group() == "{" else -1
        if depth == 0:
            return match.end()
    return len(text)


def _fences(text: str) -> list[Span]:
    spans: list[Span] = []
    opened: re.Match[str] | None = None
    for match in _FENCE.finditer(text):
        if opened is None:
            opened = match
        elif match.group(1)[0] == opened.group(1)[0] and len(match.group(1)) >= len(
            opened.group(1)
        ):
            line_end = text.find("\n", match.end())
            spans.append((opened.start(), len(text) if line_end < 0 else line_end))
            opened = None
    if opened is not None:
        spans.append((opened.start(), len(text)))
    return spans


def pasted_spans(text: str) -> list[Span]:
    """The quoted or pasted spans of ``text`` (already free of invisible characters): sorted,
    disjoint, none empty."""
    spans = _quotes(text) + _fences(text)
    spans += [(m.start(), m.end()) for m in _BLOCKQUOTE.finditer(text)]
    for pattern, at_end in ((_EMAIL_MARKERS, False), (_INTRODUCERS, True)):
        found = pattern.search(text)
        if found is not None:
            spans.append((found.end() if at_end else found.start(), len(text)))
    merged: list[Span] = []
    for start, end in sorted(spans):
        if start >= end:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _inside(spans: list[Span], start: int, end: int) -> bool:
    """Whether [start, end) overlaps one of the sorted, disjoint ``spans``."""
    last = bisect.bisect_left(spans, (end, -1)) - 1  # the last span starting before ``end``
    return last >= 0 and spans[last][1] > start


def own_words(text: str) -> str:
    """``text`` with what was quoted or pasted (and every invisible character) left out."""
    shown, _ = visible(text)
    kept, at = [], 0
    for start, end in pasted_spans(shown):
        kept.append(shown[at:start])
        at = end
    return "".join(kept) + shown[at:]


def given_addresses(text: str) -> set[str]:
    """The addresses (lower case) the person wrote in their own words in ``text``: not inside
    quoted or pasted text, and not broken up by invisible characters."""
    shown, where = visible(text)
    spans = pasted_spans(shown)
    found: set[str] = set()
    for match in ADDRESS.finditer(shown):
        start, end = match.span()
        if where[end - 1] - where[start] != end - 1 - start:
            continue  # invisible characters inside the address: pasted, never typed
        if not _inside(spans, start, end):
            found.add(match.group(0).lower())
    return found


def mentioned_addresses(text: str) -> set[str]:
    """Every address in ``text``, pasted or not (invisible characters ignored)."""
    return {m.group(0).lower() for m in ADDRESS.finditer(visible(text)[0])}
