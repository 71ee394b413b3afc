"""The model's streamed text, redacted before it is logged, whole secrets included.

Redacting each delta on its own misses a secret the model streams in pieces (``sk-li`` +
``ve-...``): no piece has the secret's shape. A :class:`StreamRedactor` redacts each line as a
whole instead, and emits only what the rest of the stream can no longer turn into a secret:

- the last word of a line is held until whitespace, the line's end or the end of the turn
  follows it (a key's shape, a JWT, a URL with credentials are only recognised whole);
- the text before it is emitted redacted *with the line before it*, so a rule keyed by what
  precedes a value (``password: ...``, ``Bearer ...``, ``mnemonic: ...``) still applies, and
  not while that redaction ends with a redacted value (the value may go on);
- a PEM block is held from its ``-----BEGIN`` to its ``-----END`` (or the end of the turn).

What was emitted is never taken back: each emission is what the line's redaction added since
the last one. Should a later redaction of the line not extend the earlier one (a rule that
looks further back than a word), only its part after what they share is emitted: text may
read oddly there, a secret never leaks.
"""

from __future__ import annotations

from collections.abc import Callable

from ..redaction import REDACTED

__all__ = ["StreamRedactor"]

_PEM_BEGIN, _PEM_END = "-----BEGIN", "-----END"


class StreamRedactor:
    """One stream of text (the model's answer, or one thinking block), redacted as it comes."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
        self._line = ""  # the raw text of the current line (a PEM block: all its lines)
        self._sent = ""  # its redaction emitted so far
        self._sent_raw = 0  # how much of ``_line`` that redaction covered

    def feed(self, text: str) -> str:
        """What may be emitted now that ``text`` arrived (often "": a word is held)."""
        self._line += text
        out: list[str] = []
        while (end := _line_end(self._line)) is not None:
            out.append(self._emit_to(end, whole=True))
            self._line, self._sent, self._sent_raw = self._line[end:], "", 0
        if _PEM_BEGIN not in self._line:  # (a PEM block is emitted whole, at its end)
            cut = max(self._line.rfind(" "), self._line.rfind("\t")) + 1
            if cut > self._sent_raw:
                out.append(self._emit_to(cut, whole=False))
        return "".join(out)

    def flush(self) -> str:
        """The rest, redacted: the stream ended (or another event must follow what it said)."""
        out = self._emit_to(len(self._line), whole=True) if self._line else ""
        self.discard()
        return out

    def discard(self) -> None:
        """Forget what is held: the turn was retracted or failed, its text is void."""
        self._line, self._sent, self._sent_raw = "", "", 0

    def _emit_to(self, end: int, *, whole: bool) -> str:
        redacted = self._redact(self._line[:end])
        if not whole and redacted.endswith(REDACTED):  # the value may go on: wait
            return ""
        if redacted.startswith(self._sent):
            new = redacted[len(self._sent) :]
        elif whole:  # the line's redaction changed what was emitted: only what follows it
            shared = 0
            for a, b in zip(redacted, self._sent, strict=False):
                if a != b:
                    break
                shared += 1
            new = redacted[shared:]
        else:  # wait for the line's end
            return ""
        self._sent += new
        self._sent_raw = end
        return new


def _line_end(text: str) -> int | None:
    """Where the first complete line ends (after its newline), a PEM block counting as one."""
    start = 0
    while (newline := text.find("\n", start)) >= 0:
        if not _pem_open(text[:newline]):
            return newline + 1
        start = newline + 1
    return None


def _pem_open(text: str) -> bool:
    begin = text.rfind(_PEM_BEGIN)
    return begin >= 0 and text.find(_PEM_END, begin) < 0
