"""A tokenizer for MySQL/MariaDB DDL text, and a cursor over its tokens.

Comments are dropped, except executable comments (`/*!50100 ... */`, MariaDB's
`/*M!100100 ... */`) whose text the server runs and so is SQL like the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from connector.errors import SluiceError


class DdlSyntaxError(SluiceError):
    """A statement the DDL parser does not understand; `offset` is where it stopped."""

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(f"{reason} (at character {offset})")
        self.reason = reason
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "word", "quoted" (backticks), "string", "number", "punct"
    text: str  # the value: unquoted, unescaped
    offset: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<xcomment>/\*M?!\d*)
  | (?P<comment>/\*.*?\*/|--(?:\s[^\n]*)?(?:\n|$)|\#[^\n]*)
  | (?P<xend>\*/)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
  | (?P<hexbin>[xXbB]'[^']*')
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<word>[A-Za-z0-9_$@\u0080-\uffff]+)
  | (?P<punct>[(),.;=+\-*/<>!%&|^~:?@{}\[\]])
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def _unescape(body: str, quote: str) -> str:
    body = body.replace(quote * 2, quote)
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[1]), body, flags=re.DOTALL)


def tokenize(sql: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if m is None:
            raise DdlSyntaxError(f"unexpected character {sql[pos]!r}", pos)
        kind = m.lastgroup
        assert kind is not None
        value = m[0]
        if kind == "quoted":
            tokens.append(Token("quoted", value[1:-1].replace("``", "`"), pos))
        elif kind == "string":
            tokens.append(Token("string", _unescape(value[1:-1], value[0]), pos))
        elif kind in ("number", "word", "punct", "hexbin"):
            tokens.append(Token("word" if kind == "word" and not value[0].isdigit() else kind, value, pos))
        pos = m.end()  # spaces, comments and the markers of executable comments vanish
    return tokens


class Cursor:
    """Reads tokens; keyword tests are case-insensitive and never match quoted names."""

    def __init__(self, sql: str) -> None:
        self.tokens = [t for t in tokenize(sql) if t.text != ";"]
        self.i = 0
        self.length = len(sql)

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def next(self, what: str) -> Token:
        token = self.peek()
        if token is None:
            raise DdlSyntaxError(f"statement ends where {what} was expected", self.length)
        self.i += 1
        return token

    def accept(self, *words: str) -> bool:
        """Consume the keywords if they come next, in order."""
        for k, word in enumerate(words):
            token = self.peek(k)
            if token is None or (not token.is_word(word) and not (token.kind == "punct" and token.text == word)):
                return False
        self.i += len(words)
        return True

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            token = self.peek()
            found = repr(token.text) if token else "the end"
            raise DdlSyntaxError(f"expected {' '.join(words)}, found {found}", self._offset())

    def is_punct(self, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.kind == "punct" and token.text == text

    def name(self, what: str) -> str:
        token = self.next(what)
        if token.kind in ("word", "quoted", "number") or token.kind == "string":
            return token.text
        raise DdlSyntaxError(f"expected {what}, found {token.text!r}", token.offset)

    def qualified(self, default_db: str) -> tuple[str, str]:
        """`db`.`table` or `table` (in the statement's default database)."""
        first = self.name("a table name")
        if self.is_punct("."):
            self.i += 1
            return first, self.name("a table name")
        return default_db, first

    def skip_balanced(self) -> None:
        """Skip a parenthesised group; the cursor is on its `(`."""
        depth = 0
        while True:
            token = self.next("a closing parenthesis")
            if token.kind == "punct" and token.text == "(":
                depth += 1
            elif token.kind == "punct" and token.text == ")":
                depth -= 1
                if depth == 0:
                    return

    def skip_to_separator(self) -> None:
        """Skip to the next `,` or `)` at this nesting level (not consumed)."""
        while not self.at_end() and not self.is_punct(",") and not self.is_punct(")"):
            if self.is_punct("("):
                self.skip_balanced()
            else:
                self.i += 1

    def _offset(self) -> int:
        token = self.peek()
        return token.offset if token else self.length
