"""A tokenizer for MySQL/MariaDB DDL text, and a cursor over its tokens.

Comments are dropped. Executable comments run where the server that logged the statement
ran them (sql/sql_lex.cc, Lex_input_stream's handling of `/*!`): `/*!NNNNN ... */` when the
server's version is at least NNNNN (MariaDB's versions are 10xxxx and 11xxxx, so it runs
MySQL's `/*!80000` ones too), `/*M!NNNNN ... */` on MariaDB only; `/*! ... */` always.
How the text reads depends on the session's sql_mode: ANSI_QUOTES makes "x" a name,
NO_BACKSLASH_ESCAPES makes a backslash an ordinary character (`Session`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from connector.errors import SluiceError
from connector.schema.zones import ZoneConverter, timestamp_in_utc

# sql_mode bits as the QUERY event's Q_SQL_MODE_CODE carries them (sql/system_variables.h;
# the same values in MariaDB's sql/sql_class.h for these).
MODE_REAL_AS_FLOAT = 1
MODE_ANSI_QUOTES = 4
MODE_NO_BACKSLASH_ESCAPES = 1 << 20


@dataclass(frozen=True, slots=True)
class Session:
    """What the server that ran a statement knew beside its text: the flavour and version
    (executable comments, type spellings), the sql_mode, and the server's default charset
    (of a database created without one), and the session's time zone."""

    mariadb: bool = False
    version: int = 0  # 80400, 101100, ...; 0: unknown (every executable comment runs)
    sql_mode: int = 0
    server_charset: str | None = None
    explicit_defaults_for_timestamp: bool = True
    # The session's time_zone (Q_TIME_ZONE_CODE), which TIMESTAMP literals are read in; None: UTC
    # (connector/schema/zones.py), and how the server converts a named or SYSTEM zone.
    time_zone: str | None = None
    zones: ZoneConverter | None = field(default=None, compare=False)

    def timestamp_in_utc(self, literal: str | None) -> str | None:
        return None if literal is None else timestamp_in_utc(literal, self.time_zone, self.zones)

    @property
    def ansi_quotes(self) -> bool:
        return bool(self.sql_mode & MODE_ANSI_QUOTES)

    @property
    def real_as_float(self) -> bool:
        return bool(self.sql_mode & MODE_REAL_AS_FLOAT)

    @property
    def backslash_escapes(self) -> bool:
        return not self.sql_mode & MODE_NO_BACKSLASH_ESCAPES


class DdlSyntaxError(SluiceError):
    """A statement the DDL parser does not understand; `offset` is where it stopped."""

    def __init__(self, reason: str, offset: int = -1) -> None:
        super().__init__(f"{reason} (at character {offset})" if offset >= 0 else reason)
        self.reason = reason
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "word", "quoted" (a quoted name), "string", "number", "punct"
    text: str  # the value: unquoted, unescaped; a hex or bit literal's bytes as latin-1 text
    offset: int
    raw: str = ""  # a string literal's introducer (`_latin1`, `N`), or "x"/"b" for hex and bit literals

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.text.upper() in words


_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<xcomment>/\*M?!\d{0,6})
  | (?P<comment>/\*.*?\*/|--(?:[ \t\r\f\v][^\n]*)?(?:\n|$)|\#[^\n]*)
  | (?P<xend>\*/)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<squote>'(?:[^'\\]|\\.|'')*')
  | (?P<dquote>"(?:[^"\\]|\\.|"")*")
  | (?P<hexlit>[xX]'[0-9a-fA-F]*'|0x[0-9a-fA-F]+(?![\w$]))
  | (?P<bitlit>[bB]'[01]*'|0b[01]+(?![\w$]))
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![^\x00-\x23\x25-\x40\x5b-\x5e\x60\x7b-\x7f]))
  | (?P<word>[^\x00-\x23\x25-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]+)  # letters, digits, _, $, non-ASCII
  | (?P<punct>[(),.;=+\-*/<>!%&|^~:?@{}\[\]\\])
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_NO_BACKSLASH_STRING = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", re.DOTALL)


def quote_identifier(name: str) -> str:
    """`name` as a MySQL identifier in backquotes (a backquote inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def _unescape(body: str, quote: str, backslashes: bool) -> str:
    if not backslashes:
        return body.replace(quote * 2, quote)
    # One pass, left to right: an escaped quote must not pair with the next one.
    return re.sub(
        r"\\(.)|" + re.escape(quote * 2), lambda m: _ESCAPES.get(m[1], m[1]) if m[1] is not None else quote, body,
        flags=re.DOTALL,
    )  # fmt: skip


def _hex_text(value: str) -> str:
    digits = value[2:-1] if value[1] == "'" else value[2:]
    if len(digits) % 2:
        digits = "0" + digits
    return bytes.fromhex(digits).decode("latin-1")


def _bit_text(value: str) -> str:
    digits = value[2:-1] if value[1] == "'" else value[2:]
    number = int(digits or "0", 2)
    return number.to_bytes((len(digits) + 7) // 8, "big").decode("latin-1")


def _version_runs(marker: str, session: Session) -> bool:
    """Does the server that logged the statement run this executable comment's text?"""
    digits = marker.lstrip("/*M!")
    if marker.startswith("/*M!") and not session.mariadb:
        return False
    return not digits or not session.version or session.version >= int(digits)


class _Lexer:
    def __init__(self, sql: str, session: Session) -> None:
        self.sql = sql
        self.session = session
        self.tokens: list[Token] = []
        self.pos = 0
        self.in_comment = False  # inside an executable comment whose text runs

    def run(self) -> list[Token]:
        sql = self.sql
        while self.pos < len(sql):
            m = self._match()
            if m is None:
                raise DdlSyntaxError(f"unexpected character {sql[self.pos]!r}", self.pos)
            self._token(m)
        return self.tokens

    def _match(self) -> re.Match[str] | None:
        if not self.session.backslash_escapes and self.sql[self.pos] in "'\"":
            return _NO_BACKSLASH_STRING.match(self.sql, self.pos)
        return _TOKEN.match(self.sql, self.pos)

    def _token(self, m: re.Match[str]) -> None:
        kind, value, start = m.lastgroup, m[0], self.pos
        self.pos = m.end()
        if kind is None:  # a string matched by the NO_BACKSLASH_ESCAPES pattern
            kind = "squote" if value[0] == "'" else "dquote"
        if kind == "xcomment":
            if not _version_runs(value, self.session):
                self._skip_comment(start)
            else:
                self.in_comment = True
        elif kind == "xend":
            if not self.in_comment:
                raise DdlSyntaxError("*/ outside a comment", start)
            self.in_comment = False
        elif kind not in ("space", "comment"):
            self.tokens.append(self._make(kind, value, start))

    def _skip_comment(self, start: int) -> None:
        end = self.sql.find("*/", self.pos)
        if end < 0:
            raise DdlSyntaxError("comment is not closed", start)
        self.pos = end + 2

    def _make(self, kind: str, value: str, start: int) -> Token:
        if kind == "quoted" or (kind == "dquote" and self.session.ansi_quotes):
            return Token("quoted", value[1:-1].replace(value[0] * 2, value[0]), start)
        if kind in ("squote", "dquote"):
            return Token("string", _unescape(value[1:-1], value[0], self.session.backslash_escapes), start)
        if kind == "hexlit":
            return Token("string", _hex_text(value), start, "x")
        if kind == "bitlit":
            return Token("string", _bit_text(value), start, "b")
        if kind == "word" and value.isdigit():
            return Token("number", value, start)
        assert kind in ("number", "word", "punct")
        return Token(kind, value, start)


def tokenize(sql: str, session: Session | None = None) -> list[Token]:
    return _Lexer(sql, session or Session()).run()


class Cursor:
    """Reads tokens; keyword tests are case-insensitive and never match quoted names."""

    def __init__(self, sql: str, session: Session | None = None) -> None:
        self.tokens = [t for t in tokenize(sql, session) if not (t.kind == "punct" and t.text == ";")]
        self.i = 0
        self.length = len(sql)
        self.end = len(self.tokens)  # reading stops here (`bounded`)

    @contextmanager
    def bounded(self, end: int | None) -> Iterator[None]:
        """Read as if the statement ended before token `end` (None: where it ends)."""
        whole, self.end = self.end, self.end if end is None else end
        try:
            yield
        finally:
            self.end = whole

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.tokens[j] if j < self.end else None

    def at_end(self) -> bool:
        return self.i >= self.end

    def next(self, what: str) -> Token:
        token = self.peek()
        if token is None:
            raise DdlSyntaxError(f"statement ends where {what} was expected", self.offset())
        self.i += 1
        return token

    def accept(self, *words: str) -> bool:
        """Consume the keywords (or punctuation) if they come next, in order."""
        for k, word in enumerate(words):
            if not self.is_at(word, k):
                return False
        self.i += len(words)
        return True

    def is_at(self, word: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and (token.is_word(word) or (token.kind == "punct" and token.text == word))

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            token = self.peek()
            found = repr(token.text) if token else "the end"
            raise DdlSyntaxError(f"expected {' '.join(words)}, found {found}", self.offset())

    def is_punct(self, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.kind == "punct" and token.text == text

    def name(self, what: str) -> str:
        """An identifier: a word (keywords that are not reserved name things too) or a quoted name."""
        token = self.next(what)
        if token.kind in ("word", "quoted") or (token.kind == "number" and token.text.isdigit()):
            return token.text
        if token.kind == "string" and not token.raw:  # MySQL takes 'name' for a column or alias name
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
                if depth <= 0:
                    return

    def items(self) -> Iterator[None]:
        """Once per item of a comma-separated list in parentheses, the `(` read already; done when
        the `)` is read (the caller reads each item where it stops)."""
        while True:
            yield
            if self.accept(")"):
                return
            self.expect(",")

    def skip_to_separator(self) -> None:
        """Skip to the next `,` or `)` at this nesting level (not consumed)."""
        while not self.at_end() and not self.is_punct(",") and not self.is_punct(")"):
            self.skip_one()

    def skip_one(self) -> None:
        """Step over one token, or one parenthesised group."""
        if self.is_punct("("):
            self.skip_balanced()
        else:
            self.i += 1

    def skip_to_end(self) -> None:
        self.i = self.end

    def offset(self) -> int:
        token = self.peek()
        if token is None and self.end < len(self.tokens):
            return self.tokens[self.end].offset
        return token.offset if token else self.length

    def is_next_string(self) -> bool:
        """Is a string literal next, maybe after its introducer (`_latin1'x'`, `N'x'`)?"""
        token = self.peek()
        if token is None or token.kind == "string":
            return token is not None
        following = self.peek(1)
        introducer = token.kind == "word" and (token.text.startswith("_") or token.text.upper() == "N")
        return introducer and following is not None and following.kind == "string"

    def string(self, what: str) -> str:
        """A string literal, as the server reads one: an optional introducer (`_utf8mb4`, `N`),
        and adjacent literals joined ('a' 'b' is 'ab')."""
        token = self.peek()
        if token is not None and token.kind != "string" and self.is_next_string():
            self.i += 1  # the introducer
        token = self.next(what)
        if token.kind != "string":
            raise DdlSyntaxError(f"expected {what}, found {token.text!r}", token.offset)
        text = token.text
        while (more := self.peek()) is not None and more.kind == "string" and not more.raw and not token.raw:
            text += more.text
            self.i += 1
        return text
