"""One column definition: its name, type and attributes, as CREATE and ALTER TABLE write them.

The attributes come in any order (MariaDB accepts them so, MySQL in most orders): NULL /
NOT NULL, DEFAULT, ON UPDATE, AUTO_INCREMENT (which makes the column NOT NULL), [PRIMARY]
KEY, UNIQUE, COMMENT, CHARACTER SET / COLLATE / BINARY / ASCII / UNICODE / BYTE, generated
columns, MariaDB's ROW START / ROW END, INVISIBLE, CHECK, REFERENCES, SRID, COMPRESSED,
WITH[OUT] SYSTEM VERSIONING and engine-defined `name = value` options. A column's charset
is settled with the table's (`PendingColumn.column`), which in CREATE TABLE comes after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from connector.schema.model import BINARY_TYPES, CHARACTER_TYPES, Column
from connector.schema.sqltokens import Cursor, DdlSyntaxError, Session
from connector.schema.types import DeclaredType, charset_of_collation, label_in, normal_charset, read_type
from connector.schema.types import sized as sized_type
from connector.sqltypes import shown_width

_NAME_CHARSETS = {"ASCII": "latin1", "UNICODE": "ucs2", "BYTE": "binary"}
# Words that end a column's attributes: its place in ALTER TABLE.
_PLACE_WORDS = ("FIRST", "AFTER")


@dataclass(slots=True)
class PendingColumn:
    """A column definition as read, until the table's charset settles the column's."""

    name: str
    declared: DeclaredType
    charset: str | None = None  # CHARACTER SET x (or ASCII/UNICODE/BYTE)
    collation: str | None = None
    binary: bool = False  # the BINARY attribute: the charset's binary collation
    # None: unsaid. NULL, NOT NULL and AUTO_INCREMENT (NOT NULL) set it in the order they come:
    # `INT AUTO_INCREMENT NULL` is nullable, `INT NULL AUTO_INCREMENT` is not (both servers).
    nullable: bool | None = None
    primary: bool = False
    unique: bool = False
    auto_increment: bool = False
    generated: str | None = None
    invisible: bool = False
    default: str | None = None
    # DEFAULT as a hex or bit literal: bytes, of the column's charset. MySQL's SHOW CREATE TABLE
    # prints a text column's DEFAULT so when utf8mb3 cannot hold it (an ENUM DEFAULT 'a😀').
    default_bytes: bool = False
    compressed: bool = False
    period: str | None = None  # "start" / "end": MariaDB's GENERATED ALWAYS AS ROW START / END
    flags: set[str] = field(default_factory=set)

    def column(self, table_charset: str | None, table_collation: str | None, session: Session) -> Column:
        charset, collation = self._charset(table_charset, table_collation)
        declared = sized_type(self.declared, charset, session.mariadb)
        if declared.name not in CHARACTER_TYPES:
            charset, collation = ("binary", "binary") if declared.name in BINARY_TYPES else (None, None)
        return Column(
            self.name, declared.name, declared.params, declared.unsigned, charset, collation,
            nullable=self._nullable(declared, session), generated=self.generated, invisible=self.invisible,
            default=self._default(declared, charset, session), compressed=self.compressed, period=self.period,
            display_width=shown_width(declared.name, declared.width, declared.unsigned, declared.zerofill,
                                      session.mariadb),
            zerofill=declared.zerofill,
        )  # fmt: skip

    def _default(self, declared: DeclaredType, charset: str | None, session: Session) -> str | None:
        if self.default_bytes and self.default is not None:  # text of the column's charset; not followed elsewhere
            return label_in(self.default, True, charset, session.mariadb) if declared.name in CHARACTER_TYPES else None
        return session.timestamp_in_utc(self.default) if declared.name == "timestamp" else self.default

    def _charset(self, table_charset: str | None, table_collation: str | None) -> tuple[str | None, str | None]:
        declared = self.declared
        charset = self.charset or declared.charset
        collation = self.collation or declared.collation
        if charset is None and collation is not None:
            charset = charset_of_collation(collation)
        if charset is None:
            charset, collation = table_charset, collation or table_collation
        if self.binary and charset is not None and charset != "binary":
            collation = f"{charset}_bin"
        return charset, collation

    def _nullable(self, declared: DeclaredType, session: Session) -> bool:
        if self.primary or self.period is not None:
            return False
        if self.nullable is None and declared.name == "timestamp" and not session.explicit_defaults_for_timestamp:
            return False  # explicit_defaults_for_timestamp=OFF: TIMESTAMP is NOT NULL unless it says NULL
        return self.nullable if self.nullable is not None else True


def read_column(cur: Cursor, session: Session) -> PendingColumn:
    """A column definition, its name first."""
    name = cur.name("a column name")
    while cur.accept("."):  # field_ident: `t1.name`, `db.t1.name` name the column `name`
        name = cur.name("a column name")
    column = PendingColumn(name, read_type(cur, session))
    if column.declared.serial:
        column.auto_increment = column.unique = True
        column.nullable = False
    _Attributes(cur, column).read()
    return column


class _Attributes:
    def __init__(self, cur: Cursor, column: PendingColumn) -> None:
        self.cur = cur
        self.col = column

    def read(self) -> None:
        cur = self.cur
        while not cur.at_end() and not cur.is_punct(",") and not cur.is_punct(")"):
            token = cur.peek()
            assert token is not None
            if token.is_word(*_PLACE_WORDS):
                return
            handler = _HANDLERS.get(token.text.upper()) if token.kind == "word" else None
            cur.i += 1
            if handler is not None:
                handler(self)
            elif cur.is_punct("="):  # an engine-defined attribute: name = value
                cur.i += 1
                cur.next("a value")
            elif token.kind == "punct" and token.text == "(":
                cur.i -= 1
                cur.skip_balanced()
            else:
                raise DdlSyntaxError(f"unexpected {token.text!r} in the definition of `{self.col.name}`", token.offset)

    def not_(self) -> None:
        cur = self.cur
        if cur.accept("NULL"):
            self.col.nullable = False
        elif not (cur.accept("SECONDARY") or cur.accept("ENFORCED")):
            raise DdlSyntaxError("NOT without NULL", cur.offset())

    def null(self) -> None:
        self.col.nullable = True

    def default(self) -> None:
        token = self.cur.peek()
        self.col.default_bytes = token is not None and token.kind == "string" and token.raw in ("x", "b")
        self.col.default = self.cur.string("a value") if self.col.default_bytes else read_default(self.cur)

    def on(self) -> None:
        self.cur.expect("UPDATE")
        read_default(self.cur)

    def auto_increment(self) -> None:
        self.col.auto_increment = True
        self.col.nullable = False

    def serial(self) -> None:  # SERIAL DEFAULT VALUE: NOT NULL AUTO_INCREMENT UNIQUE
        self.cur.expect("DEFAULT", "VALUE")
        self.col.auto_increment = self.col.unique = True
        self.col.nullable = False

    def unique(self) -> None:
        self.cur.accept("KEY") or self.cur.accept("INDEX")
        self.col.unique = True

    def primary(self) -> None:
        self.cur.expect("KEY")
        self.col.primary = True

    def key(self) -> None:  # `KEY` alone in a column definition means PRIMARY KEY
        self.col.primary = True

    def comment(self) -> None:
        self.cur.accept("=")
        self.cur.string("a comment")

    def charset(self) -> None:
        self.cur.accept("SET")  # CHARACTER SET, CHAR SET
        self.cur.accept("=")
        self.col.charset = _charset_name(self.cur)

    def charset_word(self) -> None:  # CHARSET x
        self.cur.accept("=")
        self.col.charset = _charset_name(self.cur)

    def collate(self) -> None:
        self.cur.accept("=")
        self.col.collation = self.cur.name("a collation").lower()

    def binary(self) -> None:
        if self.cur.accept("CHARACTER", "SET") or self.cur.accept("CHARSET"):
            self.col.charset = _charset_name(self.cur)
        self.col.binary = True

    def named_charset(self) -> None:  # ASCII, UNICODE, BYTE after a character type
        token = self.cur.tokens[self.cur.i - 1]
        self.col.charset = _NAME_CHARSETS[token.text.upper()]

    def generated(self) -> None:
        self.cur.expect("ALWAYS")
        self.cur.expect("AS")
        self.as_()

    def as_(self) -> None:
        cur = self.cur
        if cur.accept("ROW"):
            token = cur.next("START or END")
            if not token.is_word("START", "END"):
                raise DdlSyntaxError(f"AS ROW {token.text}", token.offset)
            self.col.period = token.text.lower()
            return
        if not cur.is_punct("("):
            raise DdlSyntaxError("AS without an expression", cur.offset())
        cur.skip_balanced()
        self.col.generated = "virtual"
        if cur.accept("STORED") or cur.accept("PERSISTENT"):
            self.col.generated = "stored"
        else:
            cur.accept("VIRTUAL")

    def invisible(self) -> None:
        self.col.invisible = True

    def visible(self) -> None:
        self.col.invisible = False

    def constraint(self) -> None:  # [CONSTRAINT name] CHECK (expr)
        if not self.cur.is_at("CHECK"):
            self.cur.name("a constraint name")
        self.cur.expect("CHECK")
        self.check()

    def check(self) -> None:
        self.cur.skip_balanced()

    def references(self) -> None:
        cur = self.cur
        cur.qualified("")
        if cur.is_punct("("):
            cur.skip_balanced()
        while cur.accept("MATCH") or cur.accept("ON"):
            cur.next("a referential action")
            while (t := cur.peek()) is not None and t.is_word("NULL", "ACTION", "DEFAULT", "CASCADE", "RESTRICT"):
                cur.i += 1

    def one_value(self) -> None:  # SRID n, COLUMN_FORMAT x, STORAGE x, ENGINE_ATTRIBUTE [=] 'x', ...
        self.cur.accept("=")
        self.cur.next("a value")

    def compressed(self) -> None:
        if self.cur.accept("="):
            self.cur.next("a compression method")
        self.col.compressed = True

    def versioning(self) -> None:  # WITH / WITHOUT SYSTEM VERSIONING
        token = self.cur.tokens[self.cur.i - 1]
        self.cur.expect("SYSTEM", "VERSIONING")
        if token.is_word("WITH"):
            self.col.flags.add("versioned")  # a versioned column makes the table versioned

    def signedness(self) -> None:  # UNSIGNED / ZEROFILL after other attributes (MariaDB reads them)
        token = self.cur.tokens[self.cur.i - 1]
        if not token.is_word("SIGNED"):
            zerofill = self.col.declared.zerofill or token.is_word("ZEROFILL")
            self.col.declared = replace(self.col.declared, unsigned=True, zerofill=zerofill)


def _charset_name(cur: Cursor) -> str:
    return normal_charset(cur.next("a charset").text)


_HANDLERS: dict[str, Callable[[_Attributes], None]] = {
    "NOT": _Attributes.not_, "NULL": _Attributes.null, "DEFAULT": _Attributes.default, "ON": _Attributes.on,
    "AUTO_INCREMENT": _Attributes.auto_increment, "SERIAL": _Attributes.serial, "UNIQUE": _Attributes.unique,
    "PRIMARY": _Attributes.primary, "KEY": _Attributes.key, "COMMENT": _Attributes.comment,
    "CHARACTER": _Attributes.charset, "CHAR": _Attributes.charset, "CHARSET": _Attributes.charset_word,
    "COLLATE": _Attributes.collate, "BINARY": _Attributes.binary,
    "ASCII": _Attributes.named_charset, "UNICODE": _Attributes.named_charset, "BYTE": _Attributes.named_charset,
    "GENERATED": _Attributes.generated, "AS": _Attributes.as_, "INVISIBLE": _Attributes.invisible,
    "VISIBLE": _Attributes.visible, "CONSTRAINT": _Attributes.constraint, "CHECK": _Attributes.check,
    "REFERENCES": _Attributes.references,
    **dict.fromkeys(("SRID", "COLUMN_FORMAT", "STORAGE", "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE",
                     "REF_SYSTEM_ID"), _Attributes.one_value),
    "COMPRESSED": _Attributes.compressed, "WITH": _Attributes.versioning, "WITHOUT": _Attributes.versioning,
    **dict.fromkeys(("UNSIGNED", "SIGNED", "ZEROFILL"), _Attributes.signedness),
}  # fmt: skip


def read_default(cur: Cursor) -> str | None:
    """A DEFAULT (or ON UPDATE) value: a literal's text, None for NULL and expressions."""
    if cur.is_punct("("):
        cur.skip_balanced()
        return None
    sign = ""
    while (t := cur.peek()) is not None and t.kind == "punct" and t.text in "+-":
        sign = "-" if (t.text == "-") != (sign == "-") else ""
        cur.i += 1
    token = cur.peek()
    if token is not None and token.kind == "string" and token.raw:
        cur.i += 1
        return None  # a hex or bit literal: bytes, not text
    if cur.is_next_string():
        return sign + cur.string("a value") if not sign else None
    token = cur.next("a value")
    if token.is_word("DATE", "TIME", "TIMESTAMP") and cur.is_next_string():
        return cur.string("a value")  # a temporal literal: DATE '2020-01-01'
    if token.is_word("NEXT"):  # MariaDB: NEXT VALUE FOR sequence
        cur.expect("VALUE", "FOR")
        cur.qualified("")
        return None
    if cur.is_punct("("):
        cur.skip_balanced()  # CURRENT_TIMESTAMP(6), NOW(), uuid()
        return None
    if token.kind == "number":
        return sign + token.text
    return None  # NULL, CURRENT_TIMESTAMP, TRUE and other words


