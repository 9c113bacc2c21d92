"""Collation ids to character sets, and a character column's bytes to the text its server has.

The id table covers MariaDB 10.11 (read from information_schema once, including the
UCA-14 ids above 2048) and MySQL 8's own ids (76, 248-250 gb18030, 255-323 utf8mb4_0900);
tests/test_charsets_live.py checks it against every id both running servers have.

Text is decoded as the server converts it, not as Python's codec of a similar name would:
every charset of both servers but the Unicode ones decodes by the server's own table
(connector/binlog/charmaps/, made by deploy/charmaps.py), MariaDB's or MySQL's where the two
differ. `text_codec` names the codec a column decodes by, registered here (so `raw.decode(name)`
works; a rows decoder calls `decoder(name).text` itself, sparing the registry's lookup):
  - a single-byte charset: its 256 characters;
  - a multi-byte one: Python's nearest codec, where its text is the server's, else the table
    walked code by code (connector/binlog/charmaps/decoding.py says when);
  - utf8mb3, utf8mb4, utf16, utf16le, utf32: Python's UTF codecs (a character's text is its code
    point); ucs2 one of its own (a pair of surrogates is two characters there).
Strictly, the text of every value the server stores decodes, and raises UnicodeDecodeError
where it cannot be exact: bytes no server stores in the charset, a character without a UTF-8
form (a UTF-16 surrogate: MariaDB's utf8mb3, utf8mb4 and utf32 and both servers' ucs2 store
them), any value of a collation id with no table. With errors=REPLACE each such byte (such a
character: all its bytes) is one U+FFFD, and a value of an unknown collation is read as UTF-8;
the rows decoders report the columns that took it (connector/binlog/rowcodec.py). A code the
server stores but shows as "?" (unassigned) is "?" here too: that is its text.
"""

from __future__ import annotations

import bisect
import codecs
import functools
from typing import Protocol

from connector.binlog import charmaps
from connector.binlog.charmaps import Charmap
from connector.binlog.charmaps.decoding import MultiByte, SingleByte, Ucs2, Unknown

# (first id, last id, charset) runs, sorted by id.
_COLLATION_RUNS: tuple[tuple[int, int, str], ...] = (
    (1, 1, "big5"),
    (2, 2, "latin2"),
    (3, 3, "dec8"),
    (4, 4, "cp850"),
    (5, 5, "latin1"),
    (6, 6, "hp8"),
    (7, 7, "koi8r"),
    (8, 8, "latin1"),
    (9, 9, "latin2"),
    (10, 10, "swe7"),
    (11, 11, "ascii"),
    (12, 12, "ujis"),
    (13, 13, "sjis"),
    (14, 14, "cp1251"),
    (15, 15, "latin1"),
    (16, 16, "hebrew"),
    (18, 18, "tis620"),
    (19, 19, "euckr"),
    (20, 20, "latin7"),
    (21, 21, "latin2"),
    (22, 22, "koi8u"),
    (23, 23, "cp1251"),
    (24, 24, "gb2312"),
    (25, 25, "greek"),
    (26, 26, "cp1250"),
    (27, 27, "latin2"),
    (28, 28, "gbk"),
    (29, 29, "cp1257"),
    (30, 30, "latin5"),
    (31, 31, "latin1"),
    (32, 32, "armscii8"),
    (33, 33, "utf8mb3"),
    (34, 34, "cp1250"),
    (35, 35, "ucs2"),
    (36, 36, "cp866"),
    (37, 37, "keybcs2"),
    (38, 38, "macce"),
    (39, 39, "macroman"),
    (40, 40, "cp852"),
    (41, 42, "latin7"),
    (43, 43, "macce"),
    (44, 44, "cp1250"),
    (45, 46, "utf8mb4"),
    (47, 49, "latin1"),
    (50, 52, "cp1251"),
    (53, 53, "macroman"),
    (54, 55, "utf16"),
    (56, 56, "utf16le"),
    (57, 57, "cp1256"),
    (58, 59, "cp1257"),
    (60, 61, "utf32"),
    (62, 62, "utf16le"),
    (63, 63, "binary"),
    (64, 64, "armscii8"),
    (65, 65, "ascii"),
    (66, 66, "cp1250"),
    (67, 67, "cp1256"),
    (68, 68, "cp866"),
    (69, 69, "dec8"),
    (70, 70, "greek"),
    (71, 71, "hebrew"),
    (72, 72, "hp8"),
    (73, 73, "keybcs2"),
    (74, 74, "koi8r"),
    (75, 75, "koi8u"),
    (76, 76, "utf8mb3"),
    (77, 77, "latin2"),
    (78, 78, "latin5"),
    (79, 79, "latin7"),
    (80, 80, "cp850"),
    (81, 81, "cp852"),
    (82, 82, "swe7"),
    (83, 83, "utf8mb3"),
    (84, 84, "big5"),
    (85, 85, "euckr"),
    (86, 86, "gb2312"),
    (87, 87, "gbk"),
    (88, 88, "sjis"),
    (89, 89, "tis620"),
    (90, 90, "ucs2"),
    (91, 91, "ujis"),
    (92, 93, "geostd8"),
    (94, 94, "latin1"),
    (95, 96, "cp932"),
    (97, 98, "eucjpms"),
    (99, 99, "cp1250"),
    (101, 124, "utf16"),
    (128, 151, "ucs2"),
    (159, 159, "ucs2"),
    (160, 183, "utf32"),
    (192, 215, "utf8mb3"),
    (223, 223, "utf8mb3"),
    (224, 247, "utf8mb4"),
    (248, 250, "gb18030"),
    (255, 323, "utf8mb4"),
    (576, 578, "utf8mb3"),
    (608, 610, "utf8mb4"),
    (640, 642, "ucs2"),
    (672, 674, "utf16"),
    (736, 738, "utf32"),
    (1025, 1025, "big5"),
    (1027, 1027, "dec8"),
    (1028, 1028, "cp850"),
    (1030, 1030, "hp8"),
    (1031, 1031, "koi8r"),
    (1032, 1032, "latin1"),
    (1033, 1033, "latin2"),
    (1034, 1034, "swe7"),
    (1035, 1035, "ascii"),
    (1036, 1036, "ujis"),
    (1037, 1037, "sjis"),
    (1040, 1040, "hebrew"),
    (1042, 1042, "tis620"),
    (1043, 1043, "euckr"),
    (1046, 1046, "koi8u"),
    (1048, 1048, "gb2312"),
    (1049, 1049, "greek"),
    (1050, 1050, "cp1250"),
    (1052, 1052, "gbk"),
    (1054, 1054, "latin5"),
    (1056, 1056, "armscii8"),
    (1057, 1057, "utf8mb3"),
    (1059, 1059, "ucs2"),
    (1060, 1060, "cp866"),
    (1061, 1061, "keybcs2"),
    (1062, 1062, "macce"),
    (1063, 1063, "macroman"),
    (1064, 1064, "cp852"),
    (1065, 1065, "latin7"),
    (1067, 1067, "macce"),
    (1069, 1070, "utf8mb4"),
    (1071, 1071, "latin1"),
    (1074, 1075, "cp1251"),
    (1077, 1077, "macroman"),
    (1078, 1079, "utf16"),
    (1080, 1080, "utf16le"),
    (1081, 1081, "cp1256"),
    (1082, 1083, "cp1257"),
    (1084, 1085, "utf32"),
    (1086, 1086, "utf16le"),
    (1088, 1088, "armscii8"),
    (1089, 1089, "ascii"),
    (1090, 1090, "cp1250"),
    (1091, 1091, "cp1256"),
    (1092, 1092, "cp866"),
    (1093, 1093, "dec8"),
    (1094, 1094, "greek"),
    (1095, 1095, "hebrew"),
    (1096, 1096, "hp8"),
    (1097, 1097, "keybcs2"),
    (1098, 1098, "koi8r"),
    (1099, 1099, "koi8u"),
    (1101, 1101, "latin2"),
    (1102, 1102, "latin5"),
    (1103, 1103, "latin7"),
    (1104, 1104, "cp850"),
    (1105, 1105, "cp852"),
    (1106, 1106, "swe7"),
    (1107, 1107, "utf8mb3"),
    (1108, 1108, "big5"),
    (1109, 1109, "euckr"),
    (1110, 1110, "gb2312"),
    (1111, 1111, "gbk"),
    (1112, 1112, "sjis"),
    (1113, 1113, "tis620"),
    (1114, 1114, "ucs2"),
    (1115, 1115, "ujis"),
    (1116, 1117, "geostd8"),
    (1119, 1120, "cp932"),
    (1121, 1122, "eucjpms"),
    (1125, 1125, "utf16"),
    (1147, 1147, "utf16"),
    (1152, 1152, "ucs2"),
    (1174, 1174, "ucs2"),
    (1184, 1184, "utf32"),
    (1206, 1206, "utf32"),
    (1216, 1216, "utf8mb3"),
    (1238, 1238, "utf8mb3"),
    (1248, 1248, "utf8mb4"),
    (1270, 1270, "utf8mb4"),
    (2048, 2215, "utf8mb3"),
    (2232, 2247, "utf8mb3"),
    (2304, 2471, "utf8mb4"),
    (2488, 2503, "utf8mb4"),
    (2560, 2727, "ucs2"),
    (2744, 2759, "ucs2"),
    (2816, 2983, "utf16"),
    (3000, 3015, "utf16"),
    (3072, 3239, "utf32"),
    (3256, 3271, "utf32"),
)
_RUN_STARTS = [run[0] for run in _COLLATION_RUNS]

BINARY_COLLATION = 63

# MySQL charset name -> Python's nearest codec: what `codec_of` gives to encode text into the
# charset (connector/schema/types.py). A value's text decodes by the servers' tables (text_codec).
_CODECS: dict[str, str] = {
    "big5": "big5",
    "latin2": "iso8859_2",
    "cp850": "cp850",
    "koi8r": "koi8_r",
    "latin1": "mysql_latin1",
    "ascii": "ascii",
    "ujis": "euc_jp",
    "sjis": "shift_jis",
    "cp1251": "cp1251",
    "hebrew": "iso8859_8",
    "tis620": "tis_620",
    "euckr": "euc_kr",
    "latin7": "iso8859_13",
    "koi8u": "koi8_u",
    "gb2312": "gb2312",
    "greek": "iso8859_7",
    "cp1250": "cp1250",
    "gbk": "gbk",
    "latin5": "iso8859_9",
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
    "ucs2": "utf-16-be",
    "cp866": "cp866",
    "macce": "mac_latin2",
    "macroman": "mac_roman",
    "cp852": "cp852",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "utf32": "utf-32-be",
    "cp932": "cp932",
    "eucjpms": "euc_jp",
    "gb18030": "gb18030",
}

# Maximum bytes per character, for turning a byte length into a declared char length.
_MAXLEN: dict[str, int] = {
    "utf8": 3,
    "utf8mb3": 3,
    "utf8mb4": 4,
    "ucs2": 2,
    "utf16": 4,
    "utf16le": 4,
    "utf32": 4,
    "big5": 2,
    "sjis": 2,
    "cp932": 2,
    "ujis": 3,
    "eucjpms": 3,
    "euckr": 2,
    "gb2312": 2,
    "gbk": 2,
    "gb18030": 4,
}


def _mysql_latin1_errors(err: UnicodeError) -> tuple[str, int]:
    # MySQL's latin1 is cp1252 with the five holes mapped to the same code points.
    assert isinstance(err, UnicodeDecodeError)
    return chr(err.object[err.start]), err.start + 1


codecs.register_error("mysql_latin1", _mysql_latin1_errors)


def _search_mysql_latin1(name: str) -> codecs.CodecInfo | None:
    if name != "mysql_latin1":
        return None
    base = codecs.lookup("cp1252")

    def decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
        return codecs.decode(data, "cp1252", "mysql_latin1"), len(data)

    return codecs.CodecInfo(base.encode, decode, name="mysql_latin1")  # type: ignore[arg-type]


codecs.register(_search_mysql_latin1)


def charset_of(collation_id: int) -> str | None:
    """Charset name of a collation id, or None when the id is unknown."""
    i = bisect.bisect_right(_RUN_STARTS, collation_id) - 1
    if i < 0:
        return None
    first, last, charset = _COLLATION_RUNS[i]
    return charset if first <= collation_id <= last else None


def codec_of(collation_id: int) -> str | None:
    """Python's nearest codec for a collation id (for encoding text into the charset, as
    connector/schema/types.py does); None for binary and for ids or charsets unknown. Decoding
    a value is `text_codec`'s."""
    charset = charset_of(collation_id)
    return None if charset is None else _CODECS.get(charset)


def max_char_len(collation_id: int) -> int:
    charset = charset_of(collation_id)
    return _MAXLEN.get(charset, 1) if charset else 1


def collation_id_of_charset(charset: str) -> int | None:
    """Some collation id of a character set (for decoding, any of its collations will do)."""
    name = {"utf8": "utf8mb3"}.get(charset.lower(), charset.lower())
    for first, _, run_charset in _COLLATION_RUNS:
        if run_charset == name:
            return first
    return None


# -- decoding as the server does -----------------------------------------------------------

UTF8_CHARSETS = frozenset({"utf8mb3", "utf8mb4"})
# The Unicode charsets: Python's codec of each decodes exactly what the servers store, but for
# surrogates (which raise, and are replaced) and ucs2's pairs (two characters: `_ucs2`).
_UNICODE: dict[str, str] = {
    "utf8mb3": "utf-8", "utf8mb4": "utf-8", "utf16": "utf-16-be", "utf16le": "utf-16-le",
    "utf32": "utf-32-be", "ucs2": "sluice_ucs2",
}  # fmt: skip
UCS2 = _UNICODE["ucs2"]
# Multi-byte charsets: the Python codec whose text is the server's for the most codes (Python
# raising on the codes the server shows as "?" aside); `tests/test_charsets.py` measures it.
_NEAREST: dict[str, str] = {
    "big5": "big5", "sjis": "shift_jis", "cp932": "cp932", "gbk": "gbk", "gb2312": "gb2312",
    "euckr": "cp949", "ujis": "euc_jp", "eucjpms": "euc_jp", "gb18030": "gb18030",
}  # fmt: skip
UNKNOWN = "sluice_unknown"  # a collation id with no charset known here
_PREFIX = "sluice_"


def flavour(mariadb: bool) -> str:
    return "mariadb" if mariadb else "mysql"


def text_codec(collation_id: int, mariadb: bool) -> str | None:
    """The codec a character column's values decode by (registered here); None for binary."""
    if collation_id == BINARY_COLLATION:
        return None
    charset = charset_of(collation_id)
    if charset in _UNICODE:
        return _UNICODE[charset]
    if charset is None or charmap(charset, mariadb) is None:
        return UNKNOWN
    return f"{_PREFIX}{flavour(mariadb)}_{charset}"


def charmap(charset: str, mariadb: bool) -> Charmap | None:
    """The server's table of a charset: the flavour's, else the other's (a charset one of them
    lacks, as MariaDB lacks gb18030, is still read as the other reads it)."""
    return charmaps.load(charset, flavour(mariadb)) or charmaps.load(charset, flavour(not mariadb))


def single_byte_texts(collation_id: int, mariadb: bool | None = None) -> tuple[str | None, ...] | None:
    """Each byte's text in a single-byte charset (None where the server stores no such byte):
    MariaDB's table or MySQL's, or with `mariadb` None the table both servers share; None for
    any other charset, and where there is no shared table (MariaDB's ascii stores 0x80-0xff as
    "?", MySQL's none of them)."""
    charset = charset_of(collation_id)
    if charset is None or charset in _UNICODE:
        return None
    tables = [charmap(charset, server) for server in ((True, False) if mariadb is None else (mariadb,))]
    if tables[0] is None or len(set(tables)) != 1 or tables[0].widths != {1}:
        return None
    texts: list[str | None] = [None] * 256
    for code, text in tables[0].items():
        texts[code[0]] = "?" if text is None else text
    return tuple(texts)


# -- the codecs' registry ---------------------------------------------------------------------


class Decoder(Protocol):
    """A charset's decoder (connector/binlog/charmaps/decoding.py)."""

    name: str
    exact_or_raises: str | None  # a Python codec whose text, where it gives one, is this decoder's

    def text(self, data: bytes) -> str:
        """The exact text, or UnicodeDecodeError."""

    def decode(self, data: bytes, errors: str = "strict") -> tuple[str, int]:
        """A codec's decode."""


@functools.cache
def decoder(codec: str) -> Decoder | None:
    """The decoder of a codec `text_codec` names, made (and its table read) when first asked
    for; None for Python's own codecs (utf-8 and the like)."""
    if codec == UCS2:
        return Ucs2()
    if codec == UNKNOWN:
        return Unknown()
    flavour_name, _, charset = codec.removeprefix(_PREFIX).partition("_")
    if not codec.startswith(_PREFIX) or flavour_name not in charmaps.FLAVOURS:
        return None
    table = charmap(charset, flavour_name == "mariadb")
    if table is None:
        return None
    if table.widths == {1}:
        return SingleByte(codec, table)
    return MultiByte(codec, table, _NEAREST.get(charset))


def _search(name: str) -> codecs.CodecInfo | None:
    found = decoder(name)
    if found is None:
        return None

    def encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
        raise UnicodeError(f"{name} only decodes (codec_of names a codec that encodes)")

    return codecs.CodecInfo(encode, found.decode, name=name)  # type: ignore[arg-type]


codecs.register(_search)
