"""Whether a text is the beginning of a JSON document: what a grammar-constrained answer
cut short by max_tokens must be (its grammar allowed each token, so some ending makes it
valid JSON). A recursive-descent reader that reports running out of text apart from a
fault in it."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_SPACE = " \t\n\r"


class _Ended(Exception):
    """The text ended before the document did: all of it read was valid."""


class _Invalid(Exception):
    pass


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        while self.pos < len(self.text) and self.text[self.pos] in _SPACE:
            self.pos += 1
        if self.pos >= len(self.text):
            raise _Ended
        return self.text[self.pos]

    def expect(self, word: str) -> None:
        rest = self.text[self.pos : self.pos + len(word)]
        if not word.startswith(rest):
            raise _Invalid(rest)
        self.pos += len(rest)
        if len(rest) < len(word):
            raise _Ended

    def value(self) -> None:
        c = self.peek()
        if c == "{":
            self.items("}", member=True)
        elif c == "[":
            self.items("]", member=False)
        elif c == '"':
            self.string()
        elif c in "tfn":
            self.expect({"t": "true", "f": "false", "n": "null"}[c])
        else:
            self.number()

    def items(self, close: str, member: bool) -> None:
        self.pos += 1
        if self.peek() == close:
            self.pos += 1
            return
        while True:
            if member:
                if self.peek() != '"':
                    raise _Invalid("a key")
                self.string()
                self.expect_char(":")
            self.value()
            c = self.peek()
            self.pos += 1
            if c == close:
                return
            if c != ",":
                raise _Invalid(c)

    def expect_char(self, char: str) -> None:
        if self.peek() != char:
            raise _Invalid(char)
        self.pos += 1

    def string(self) -> None:
        self.pos += 1
        while True:
            if self.pos >= len(self.text):
                raise _Ended
            c = self.text[self.pos]
            self.pos += 1
            if c == '"':
                return
            if c == "\\":
                if self.pos >= len(self.text):
                    raise _Ended
                if self.text[self.pos] == "u":
                    digits = self.text[self.pos + 1 : self.pos + 5]
                    if not all(d in "0123456789abcdefABCDEF" for d in digits):
                        raise _Invalid(digits)
                    self.pos += 1 + len(digits)
                    if len(digits) < 4:
                        raise _Ended
                elif self.text[self.pos] in '"\\/bfnrt':
                    self.pos += 1
                else:
                    raise _Invalid(self.text[self.pos])
            elif ord(c) < 0x20:
                raise _Invalid("a control character in a string")

    def number(self) -> None:
        match = _NUMBER.match(self.text, self.pos)
        rest = self.text[self.pos :]
        if match is None or match.end() == self.pos:
            if rest in ("-",):
                raise _Ended
            raise _Invalid(rest[:10])
        self.pos = match.end()
        if self.pos >= len(self.text):
            raise _Ended  # more digits may follow
        if self.text[self.pos] in ".eE+-":  # a fraction or exponent cut short
            tail = self.text[self.pos :]
            if re.fullmatch(r"\.|[eE][+-]?", tail):
                raise _Ended
            raise _Invalid(tail[:10])


def is_json_prefix(text: str) -> bool:
    """Whether `text` is all valid so far as JSON: a whole document, or the beginning of one."""
    reader = _Reader(text)
    try:
        reader.value()
        while reader.pos < len(text) and text[reader.pos] in _SPACE:
            reader.pos += 1
        return reader.pos == len(text)
    except _Ended:
        return True
    except _Invalid:
        return False
