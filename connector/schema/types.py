"""Data types as the servers' grammars spell them, reduced to one canonical name each.

Every spelling of sql/sql_yacc.yy's `type` rule (MySQL 8.4/9.x; MariaDB 10.11/11's
sql/sql_yacc.yy `field_type`) is read here: the integer synonyms (INT1..INT8, MIDDLEINT,
BOOL, SERIAL), FLOAT(p) and FLOAT(M,D) with the lexer's decimal literals (`FLOAT(7.4)` is
FLOAT(7)), DOUBLE [PRECISION], REAL (FLOAT under REAL_AS_FLOAT), DEC/NUMERIC/FIXED,
NATIONAL / NCHAR / CHARACTER VARYING spellings, LONG [VARCHAR|VARBINARY], TEXT(n) and
BLOB(n) sized by their charset, ENUM/SET labels, temporal precisions, JSON (LONGTEXT on
MariaDB), geometry, VECTOR and MariaDB's INET4/INET6/UUID. What a column's charset makes
of its type (CHARACTER SET binary: BINARY/VARBINARY/BLOB) is settled once the charset is
known (`sized`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from connector.binlog.charsets import codec_of, collation_id_of_charset
from connector.schema.model import GEOMETRY_TYPES
from connector.schema.sqltokens import Cursor, DdlSyntaxError, Session

INTEGER_TYPES = {
    "tinyint": "tinyint", "int1": "tinyint", "smallint": "smallint", "int2": "smallint",
    "mediumint": "mediumint", "int3": "mediumint", "middleint": "mediumint", "int": "int", "integer": "int",
    "int4": "int", "bigint": "bigint", "int8": "bigint",
}  # fmt: skip
TEXT_TYPES = ("tinytext", "text", "mediumtext", "longtext")
BLOB_TYPES = ("tinyblob", "blob", "mediumblob", "longblob")
# Binary counterparts of the character types (a column whose charset is `binary`).
BINARY_OF = {"char": "binary", "varchar": "varbinary", **dict(zip(TEXT_TYPES, BLOB_TYPES))}
# Bytes per character (strings/ctype-*.c mbmaxlen); single-byte charsets are absent.
MBMAXLEN = {
    "utf8mb3": 3, "utf8mb4": 4, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2, "sjis": 2,
    "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2, "gb2312": 2, "gbk": 2, "gb18030": 4,
}  # fmt: skip
NATIONAL_CHARSET = "utf8mb3"  # NATIONAL CHAR and NCHAR: MySQL and MariaDB both


@dataclass(frozen=True, slots=True)
class DeclaredType:
    """A column's type as written, before its charset is known."""

    name: str  # canonical: "int", "varchar", "decimal", "enum", "mediumtext", ...
    params: tuple[str, ...] = ()  # length / (precision, scale) / ENUM and SET labels
    unsigned: bool = False
    charset: str | None = None  # a charset the spelling implies: NATIONAL, MariaDB's JSON
    collation: str | None = None
    length: int | None = None  # TEXT(n) / BLOB(n): sized when the charset is known
    serial: bool = False  # SERIAL: BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE
    hex_labels: tuple[bool, ...] = ()  # ENUM/SET labels written as hex or bit literals: bytes, not text
    width: int | None = None  # an integer's display width as written: INT(5), BOOL's TINYINT(1)
    zerofill: bool = False  # ZEROFILL (numeric types; it implies UNSIGNED)


def normal_charset(name: str) -> str:
    """`utf8` is utf8mb3 on both servers (MySQL 8.0.30+ reports it so; MariaDB with its
    default old_mode UTF8_IS_UTF8MB3)."""
    lowered = name.lower()
    return "utf8mb3" if lowered == "utf8" else lowered


def charset_of_collation(collation: str) -> str:
    lowered = collation.lower()
    return "binary" if lowered == "binary" else normal_charset(lowered.split("_", 1)[0])


def blob_type(length: int, text: bool) -> str:
    """The smallest TEXT/BLOB type holding `length` bytes (sql/field.cc, get_blob_type_from_length)."""
    kinds = TEXT_TYPES if text else BLOB_TYPES
    if length < 256:
        return kinds[0]
    if length < 65536:
        return kinds[1]
    return kinds[2] if length < 1 << 24 else kinds[3]


def read_type(cur: Cursor, session: Session) -> DeclaredType:
    token = cur.next("a data type")
    if token.kind != "word":
        raise DdlSyntaxError(f"expected a data type, found {token.text!r}", token.offset)
    word = token.text.lower()
    reader = _READERS.get(word)
    if reader is not None:
        return reader(cur, word, session)
    raise DdlSyntaxError(f"unknown data type {token.text!r}", token.offset)


def _params(cur: Cursor) -> tuple[str, ...]:
    """A parenthesised list of numbers or strings: (10), (10,2), ('a','b')."""
    if not cur.is_punct("("):
        return ()
    cur.i += 1
    out: list[str] = []
    while not cur.accept(")"):
        token = cur.peek()
        if token is not None and (token.kind == "string" or (token.kind == "word" and cur.is_next_string())):
            out.append(cur.string("a value"))
        else:
            token = cur.next("a type parameter")
            if token.kind != "number":
                raise DdlSyntaxError(f"expected a number, found {token.text!r}", token.offset)
            out.append(token.text)
        if not cur.accept(","):
            cur.expect(")")
            break
    return tuple(out)


def number(text: str, offset: int) -> int:
    """A length as the lexer reads it: `7.4` is a decimal literal whose integer part counts."""
    try:
        return int(float(text))
    except (ValueError, OverflowError) as exc:
        raise DdlSyntaxError(f"{text!r} is not a length", offset) from exc


def _lengths(cur: Cursor) -> tuple[int, ...]:
    start = cur.offset()
    return tuple(number(p, start) for p in _params(cur))


def _sign(cur: Cursor, unsigned: bool = False) -> bool:
    while (t := cur.peek()) is not None and t.is_word("UNSIGNED", "SIGNED", "ZEROFILL"):
        unsigned = unsigned or t.text.upper() != "SIGNED"  # ZEROFILL implies UNSIGNED
        cur.i += 1
    return unsigned


def _numeric(cur: Cursor, name: str, params: tuple[str, ...] = (), width: int | None = None) -> DeclaredType:
    """A numeric type and its UNSIGNED / SIGNED / ZEROFILL words."""
    start = cur.i
    unsigned = _sign(cur)
    zerofill = any(t.is_word("ZEROFILL") for t in cur.tokens[start : cur.i])
    return DeclaredType(name, params, unsigned, width=width, zerofill=zerofill)


def _integer(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """The display width changes no value; it is kept for the type's text as SHOW CREATE TABLE
    prints it (connector/sqltypes.py: canal-json's mysqlType)."""
    widths = _lengths(cur)
    return _numeric(cur, INTEGER_TYPES[word], width=widths[0] if widths else None)


def _bool(cur: Cursor, word: str, session: Session) -> DeclaredType:
    return DeclaredType("tinyint", width=1)


def _serial(cur: Cursor, word: str, session: Session) -> DeclaredType:
    return DeclaredType("bigint", unsigned=True, serial=True)


def _float(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """FLOAT(p): FLOAT up to 24 bits of precision, DOUBLE above; FLOAT(M,D) keeps both."""
    lengths = _lengths(cur)
    if len(lengths) == 1:
        return _numeric(cur, "float" if lengths[0] <= 24 else "double")
    return _numeric(cur, "float", tuple(str(n) for n in lengths))


def _double(cur: Cursor, word: str, session: Session) -> DeclaredType:
    if word == "double":
        cur.accept("PRECISION")
    name = "float" if (word == "real" and session.real_as_float) or word == "float4" else "double"
    return _numeric(cur, name, tuple(str(n) for n in _lengths(cur)))


def _decimal(cur: Cursor, word: str, session: Session) -> DeclaredType:
    lengths = _lengths(cur)
    precision = str(lengths[0]) if lengths and lengths[0] else "10"  # DECIMAL(0) is DECIMAL(10)
    scale = str(lengths[1]) if len(lengths) > 1 else "0"
    return _numeric(cur, "decimal", (precision, scale))


def _bit(cur: Cursor, word: str, session: Session) -> DeclaredType:
    lengths = _lengths(cur)
    return DeclaredType("bit", (str(lengths[0] if lengths and lengths[0] else 1),))  # BIT(0): MariaDB's BIT(1)


def _char(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """CHAR, CHARACTER, CHAR VARYING, CHARACTER VARYING, VARCHAR, VARCHARACTER."""
    varying = word in ("varchar", "varcharacter") or cur.accept("VARYING")
    return _sized_string("varchar" if varying else "char", cur, None)


def _national(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """NATIONAL CHAR[ACTER] [VARYING], NATIONAL VARCHAR, NCHAR [VARYING|VARCHAR], NVARCHAR."""
    if word == "national":
        token = cur.next("CHAR or VARCHAR")
        word = token.text.lower()
        if word not in ("char", "character", "varchar", "varcharacter"):
            raise DdlSyntaxError(f"NATIONAL {token.text}: not a type", token.offset)
    varying = word in ("varchar", "varcharacter", "nvarchar") or cur.accept("VARYING") or cur.accept("VARCHAR")
    varying = varying or cur.accept("VARCHARACTER")
    return _sized_string("varchar" if varying else "char", cur, NATIONAL_CHARSET)


def _sized_string(name: str, cur: Cursor, charset: str | None) -> DeclaredType:
    lengths = _lengths(cur)
    if name in ("varchar", "varbinary") and not lengths:
        raise DdlSyntaxError(f"{name.upper()} without a length", cur.offset())
    return DeclaredType(name, (str(lengths[0] if lengths else 1),), charset=charset)


def _binary(cur: Cursor, word: str, session: Session) -> DeclaredType:
    return _sized_string(word, cur, None)


def _long(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """LONG and LONG VARCHAR / LONG CHAR VARYING are MEDIUMTEXT; LONG VARBINARY is MEDIUMBLOB."""
    if cur.accept("VARBINARY"):
        return DeclaredType("mediumblob")
    cur.accept("VARCHAR") or cur.accept("CHAR", "VARYING") or cur.accept("VARCHARACTER")
    return DeclaredType("mediumtext")


def _lob(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """TEXT(n) and BLOB(n) become the smallest type holding n characters / bytes."""
    lengths = _lengths(cur) if word in ("text", "blob") else ()
    return DeclaredType(word, length=lengths[0] if lengths else None)


def _labels(cur: Cursor, word: str, session: Session) -> DeclaredType:
    """ENUM/SET labels; the servers strip their trailing spaces (sql/sql_table.cc)."""
    cur.expect("(")
    labels: list[str] = []
    hex_labels: list[bool] = []
    for _ in cur.items():
        token = cur.peek()
        hex_labels.append(token is not None and token.kind == "string" and token.raw in ("x", "b"))
        labels.append(cur.string("a label"))
    return DeclaredType(word, tuple(labels), hex_labels=tuple(hex_labels))


def _temporal(cur: Cursor, word: str, session: Session) -> DeclaredType:
    lengths = _lengths(cur)
    if word == "year":
        _sign(cur)  # YEAR UNSIGNED: accepted, deprecated, and no different
        two_digits = session.mariadb and lengths == (2,)  # MySQL 8 makes YEAR(2) YEAR
        return DeclaredType(word, ("2",) if two_digits else ())
    if word == "date" or not lengths or lengths[0] == 0:
        return DeclaredType(word)
    return DeclaredType(word, (str(lengths[0]),))


def _json(cur: Cursor, word: str, session: Session) -> DeclaredType:
    if session.mariadb:  # an alias of LONGTEXT COLLATE utf8mb4_bin (with a json_valid CHECK)
        return DeclaredType("longtext", charset="utf8mb4", collation="utf8mb4_bin")
    return DeclaredType("json")


def _geometry(cur: Cursor, word: str, session: Session) -> DeclaredType:
    if word in ("geometrycollection", "geomcollection"):
        word = "geometrycollection" if session.mariadb else "geomcollection"  # what each reports
    return DeclaredType(word)


def _vector(cur: Cursor, word: str, session: Session) -> DeclaredType:
    lengths = _lengths(cur)
    return DeclaredType("vector", (str(lengths[0] if lengths else 2048),))


def _plain(cur: Cursor, word: str, session: Session) -> DeclaredType:
    return DeclaredType(word)


_READERS: dict[str, Callable[[Cursor, str, Session], DeclaredType]] = {
    **dict.fromkeys(INTEGER_TYPES, _integer), "bool": _bool, "boolean": _bool, "serial": _serial,
    "float": _float, "float4": _double, "float8": _double, "double": _double, "real": _double,
    "decimal": _decimal, "dec": _decimal, "numeric": _decimal, "fixed": _decimal, "bit": _bit,
    "char": _char, "character": _char, "varchar": _char, "varcharacter": _char,
    "national": _national, "nchar": _national, "nvarchar": _national,
    "binary": _binary, "varbinary": _binary, "long": _long,
    **dict.fromkeys((*TEXT_TYPES, *BLOB_TYPES), _lob),
    "enum": _labels, "set": _labels,
    **dict.fromkeys(("date", "time", "datetime", "timestamp", "year"), _temporal),
    "json": _json, **dict.fromkeys(GEOMETRY_TYPES, _geometry), "vector": _vector,
    **dict.fromkeys(("inet4", "inet6", "uuid"), _plain),
}  # fmt: skip


def sized(declared: DeclaredType, charset: str | None, mariadb: bool = False) -> DeclaredType:
    """The type once its column's charset is known: binary counterparts under the `binary`
    charset, TEXT(n) sized in bytes (n characters of the charset), a VARCHAR too long for 65535
    bytes made the TEXT type that holds it (as the servers do outside strict mode; in strict
    mode they refuse it), ENUM/SET labels as the charset holds them."""
    name = declared.name
    width = MBMAXLEN.get(charset or "", 1)
    if charset == "binary" and name in BINARY_OF:
        declared = replace(declared, name=BINARY_OF[name])
    if declared.length is not None:
        text = declared.name in TEXT_TYPES
        declared = replace(declared, name=blob_type(declared.length * (width if text else 1), text), length=None)
    if declared.name in ("varchar", "varbinary") and declared.params:
        text = declared.name == "varchar"
        size = int(declared.params[0]) * (width if text else 1)
        if size > MAX_VARCHAR_BYTES:
            declared = replace(declared, name=blob_type(size, text), params=())
    if declared.name in ("enum", "set"):
        hexes = declared.hex_labels or (False,) * len(declared.params)
        labels = tuple(label_in(label, raw, charset, mariadb).rstrip(" ") for label, raw in zip(declared.params, hexes))
        declared = replace(declared, params=labels)
    return declared


MAX_VARCHAR_BYTES = 65535  # MAX_FIELD_VARCHARLENGTH
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def label_in(label: str, raw: bool, charset: str | None, mariadb: bool = False) -> str:
    """An ENUM/SET label as a column of `charset` stores it. A quoted label (text) is converted,
    characters the charset lacks becoming '?'; a hex or bit literal is bytes of the charset,
    kept up to the first that do not form a character (MySQL's well-formed prefix), or with
    each such byte a '?' (MariaDB). Binary labels are one character per byte, as binary
    strings are published."""
    if charset is None or charset == "binary":
        return label if raw else label.encode("utf-8").decode("latin-1")
    codec = _codec(charset)
    if codec is None:
        return label
    if raw:
        data = label.encode("latin-1")
        if mariadb:
            text = data.decode(codec, "replace").replace("\ufffd", "?")
            return as_printed(text) if charset in ("utf8mb3", "ucs2") else text
        try:
            text = data.decode(codec)
        except UnicodeDecodeError as exc:
            text = data[: exc.start].decode(codec)
        return _ASTRAL.split(text, 1)[0] if charset in ("utf8mb3", "ucs2") else text
    if charset in ("utf8mb3", "ucs2"):
        return as_printed(label)
    return label.encode(codec, "replace").decode(codec)


def as_printed(label: str) -> str:
    """A label as SHOW CREATE TABLE prints it: characters outside the BMP as '?'."""
    return _ASTRAL.sub("?", label)


def _codec(charset: str) -> str | None:
    collation = collation_id_of_charset(charset)
    return None if collation is None else codec_of(collation)
