"""Read a JSON object as it arrives: its members one by one, and the elements of chosen arrays one by one.

A listing answer (``{"nextPageToken": ..., "items": [...], "prefixes": [...]}``) is read this way so
that memory holds one element and one network chunk at a time, however many items the server put
in one page (GCS answers at most 1000; an emulator may answer everything at once). Elements are
decoded by the standard library's C scanner (``json.JSONDecoder.raw_decode``).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator
from typing import Any

_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()
_COMPACT_AT = 1 << 16


class _Text:
    """Decoded text over an iterable of byte chunks, with a read position."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Append the next chunk's text; False at the end of the input."""
        if self.eof:
            return False
        if self.pos >= _COMPACT_AT:
            self.buf, self.pos = self.buf[self.pos :], 0
        for chunk in self._chunks:
            text = self._utf8.decode(chunk)
            if text:
                self.buf += text
                return True
        self.eof = True
        tail = self._utf8.decode(b"", final=True)
        self.buf += tail
        return bool(tail)

    def peek(self) -> str:
        """The next character that is not whitespace (not consumed); ``""`` at the end."""
        while True:
            buf, pos = self.buf, self.pos
            while pos < len(buf) and buf[pos] in _WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise ValueError(f"expected {char!r} in the JSON answer, found {found or 'its end'!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next complete JSON value."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self.more():
                    continue
                raise ValueError("the JSON answer ends inside a value") from None
            if end >= len(self.buf) and isinstance(value, (int, float)) and self.more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value


def iter_members(chunks: Iterable[bytes], streamed: frozenset[str]) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` for each member of the top-level JSON object in ``chunks``; for a key in
    ``streamed`` whose value is an array, ``(key, element)`` for each element instead.

    Raises ``ValueError`` if the input is not one complete JSON object.
    """
    text = _Text(chunks)
    text.expect("{")
    if text.peek() == "}":
        text.pos += 1
    else:
        while True:
            key = text.value()
            if not isinstance(key, str):
                raise ValueError("a JSON object key is not a string")
            text.expect(":")
            if key in streamed and text.peek() == "[":
                text.pos += 1
                if text.peek() == "]":
                    text.pos += 1
                else:
                    while True:
                        yield key, text.value()
                        after = text.peek()
                        text.pos += 1
                        if after == "]":
                            break
                        if after != ",":
                            raise ValueError(f"expected ',' or ']' in the JSON answer, found {after!r}")
            else:
                yield key, text.value()
            after = text.peek()
            text.pos += 1
            if after == "}":
                break
            if after != ",":
                raise ValueError(f"expected ',' or '}}' in the JSON answer, found {after!r}")
    if text.peek():
        raise ValueError("the JSON answer goes on after its object")
