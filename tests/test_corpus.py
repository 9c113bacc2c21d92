"""Golden tests over every real binlog file in ../shared/binlog-corpus."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest

from connector import flat
from connector.binlog import coltypes
from connector.binlog.constants import LOG_EVENT_BINLOG_IN_USE_F, ColumnType, EventType, RowsKind
from connector.binlog.events import (
    FormatDescriptionEvent,
    GtidEvent,
    RotateEvent,
    TransactionPayloadEvent,
    XidEvent,
)
from connector.binlog.file import iter_file_events
from connector.binlog.parser import BinlogParser, verify_crc
from connector.binlog.rows import RowsEvent
from connector.binlog.tablemap import TableMapEvent
from connector.commands.decode import decode_files
from connector.errors import BinlogDecodeError, ChecksumMismatchError, TruncatedBinlogError, UnsupportedBinlogError
from connector.flat import FlatMessageBuilder, JsonLineEncoder, RowBatch, whole_renderers
from connector.offset import Offset
from connector.querytext import WHOLE_QUERIES
from tests.support.corpus import (
    CORPUS,
    CorpusFile,
    corpus_files,
    events_of,
    expected_verbose_sections,
    rows_events,
    verbose_lines,
    verbose_rows,
)

FILES = corpus_files()


def test_readme_lists_every_binary_file() -> None:
    on_disk = {p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".md", ".result", ".txt")}
    assert {f.path for f in FILES} == on_disk
    assert len(FILES) == 169


@pytest.mark.parametrize("entry", FILES, ids=lambda f: f.name)
def test_every_file_decodes_or_stops_with_a_typed_error(entry: CorpusFile) -> None:
    try:
        events = events_of(entry.name)
    except BinlogDecodeError as exc:
        assert entry.may_fail, f"{entry.name} is not marked OLD/EDITED/TRUNCATED/ENCRYPTED: {exc}"
        assert exc.file and str(exc).startswith(exc.file)
        return
    expected = entry.event_count
    if expected is not None:
        assert len(events) == expected


def test_how_many_files_decode_to_the_end() -> None:
    # 145 of 169 decode completely, OLD ones included; the other 24 are truncated,
    # encrypted, CRC-edited, pre-v4, or pre-GA 5.1 and stop with a typed error.
    decoded = 0
    for entry in FILES:
        try:
            events_of(entry.name)
        except BinlogDecodeError:
            continue
        decoded += 1
    assert decoded == 145


def test_article_file_with_checksums_gives_the_published_row() -> None:
    events = events_of("article-hexdumps/mysql-bin.000005")
    fde = events[0]
    assert isinstance(fde.body, FormatDescriptionEvent)
    assert fde.header.flags & LOG_EVENT_BINLOG_IN_USE_F  # the quirk: in-use flag set...
    raw = (CORPUS / "article-hexdumps/mysql-bin.000005").read_bytes()[4 : 4 + fde.header.event_length]
    assert verify_crc(raw, is_fde=True)  # ...and the CRC verifies only with it cleared
    assert not verify_crc(raw, is_fde=False)
    gtid = next(e.body for e in events if isinstance(e.body, GtidEvent))
    assert gtid.gtid == "a09129d9-0728-11e9-aa93-d227f810ba81:74"
    assert (gtid.last_committed, gtid.sequence_number) == (0, 1)
    (rows,) = rows_events(events)
    assert rows.table is not None and (rows.table.schema, rows.table.table, rows.table_id) == ("test", "user", 129)
    assert rows.rows == ((None, (20, "litao", 110, "beijing", "1999-12-31 16:00:00")),)
    assert isinstance(events[-1].body, XidEvent) and events[-1].body.xid == 581292


def test_article_file_without_checksums_gives_the_published_row() -> None:
    (rows,) = rows_events(events_of("article-hexdumps/mysql-bin.000006"))
    assert rows.table is not None and [c.nullable for c in rows.table.columns] == [False] * 5 + [True]
    assert rows.rows == ((None, (22, "litao", 201, "shanghai", "2000-12-11 16:00:00", 0.8)),)


@pytest.mark.parametrize(
    ("result", "folder"),
    [
        (
            "mysql-server/mysql-test/suite/binlog/r/binlog_row_mysqlbinlog_verbose.result",
            "mysql-server/mysql-test/suite/binlog/std_data",
        ),
        (
            "mariadb-server/mysql-test/suite/binlog/r/binlog_row_mysqlbinlog_verbose.result",
            "mariadb-server/mysql-test/suite/binlog/std_data",
        ),
    ],
)
def test_rows_match_mysqlbinlog_verbose_output(result: str, folder: str) -> None:
    sections = expected_verbose_sections(CORPUS / result)
    assert len(sections) == 4
    for name, expected in sections.items():
        assert verbose_lines(rows_events(events_of(f"{folder}/{name}"))) == expected, name


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in (CORPUS / "mysql-cdc-rs").glob("5.7_*_dump.txt") if "\n###" in p.read_text()),
)
def test_rows_match_mysql_cdc_rs_dumps(name: str) -> None:
    expected = verbose_rows((CORPUS / "mysql-cdc-rs" / name).read_text())
    binlog = name.replace("_dump.txt", "_log.bin")
    assert verbose_lines(rows_events(events_of(f"mysql-cdc-rs/{binlog}"))) == expected


def test_vector_values_match_mysql_test_facts() -> None:
    out = io.StringIO()
    decode_files([str(CORPUS / "mysql-server/mysql-test/std_data/rpl_vector_binlog.000001")], out)
    text = out.getvalue()
    for vector in ("1.00000e+00,2.00000e+00,3.00000e+00,4.00000e+00", "1.10000e+00,2.10000e+00,3.10000e+00,4.10000e+00",
                   "1.20000e+00,2.20000e+00,3.20000e+00,4.20000e+00"):  # fmt: skip
        assert text.count(vector) == 1
    messages = [json.loads(line) for line in text.splitlines()]
    # One VECTOR(4) column in each of the three inserted rows' tables.
    assert sum(1 for m in messages for t in (m["mysqlType"] or {}).values() if t == "vector(4)") == 3


def test_decimal_row_from_percona_57() -> None:
    events = events_of("rust-mysql-binlog/bin-log.000001")
    rows = rows_events(events)
    first = rows[0]
    # a DECIMAL in a row image is its text (values.decimal_text_decoder): the Avro path reads it as a Decimal
    assert first.rows[0][1] is not None and first.rows[0][1][:2] == (1, "0.10000")
    gtids = [e.body.gtid for e in events if isinstance(e.body, GtidEvent)]
    assert "87cee3a4-6b31-11e7-bdfd-0d98d6698870:14918" in gtids
    rows_event = next(e for e in events if e.body is first)
    assert rows_event.header.timestamp == 1550192291


def test_compressed_transaction_payload_and_partial_json_update() -> None:
    events = events_of("mariadb-server/mysql-test/std_data/mdev35643_mysql_80_binlog.000001")
    payload = next(e.body for e in events if isinstance(e.body, TransactionPayloadEvent))
    inner_rows = rows_events(list(payload.events))
    values = [after for r in inner_rows for _, after in r.rows]
    assert len(values) == 100
    # The test's SQL wrote REPEAT('\\/',100) inside a string: '\/' is no escape MySQL
    # knows, so the stored text is 100 slashes.
    assert values[0] == (1000, 0, "--0--" + "/" * 100 + "--")
    assert values[99] == (1099, 99, "--99--" + "/" * 100 + "--")
    partial = [r for r in rows_events(events) if r.type_code == EventType.PARTIAL_UPDATE_ROWS_EVENT]
    ((before, after),) = partial[0].rows
    assert before is not None and after is not None
    assert json.loads(before[1]) == {"a": "hulu", "b": "[zyzzy]" * 100, "c": "bulu"}
    assert json.loads(after[1]) == {"a": "hulu", "b": "oOo" * 50, "c": "bulu"}


def test_partial_json_without_before_image_is_kept_as_the_diff() -> None:
    events = events_of("rust_mysql_common/json.binlog.000001")
    partial = [r for r in rows_events(events) if r.type_code == EventType.PARTIAL_UPDATE_ROWS_EVENT]
    out = io.StringIO()
    decode_files([str(CORPUS / "rust_mysql_common/json.binlog.000001")], out)
    updates = [json.loads(line) for line in out.getvalue().splitlines() if '"UPDATE"' in line]
    assert len(partial) == 1 and len(updates) == 6 + 6
    # MINIMAL before image: only the primary key, so the diff itself is the value.
    assert updates[-1]["data"][0] == {
        "@1": "6", "@2": "JSON_REPLACE(`@2`, '$.age', CAST('42' AS JSON))", "@3": "Pete", "@4": "42",
    }  # fmt: skip
    assert updates[-1]["old"] == [{}]


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("mysql-binlog-connector-java/mysql-bin.checksum-crc32", 303),
        ("mysql-binlog-connector-java/mysql-bin.checksum-none", 191),
        ("mysql-binlog-connector-java/mysql-bin.sakila.gz", 1462),
        ("mysql-binlog-connector-java/mysql-bin.compressed", 5),
        ("mysql-binlog-connector-rust/mysql-bin.000057", 8),
        ("mysql-binlog-connector-rust/mysql-bin.000080", 37),
    ],
)
def test_event_counts_upstream_tests_expect(name: str, count: int) -> None:
    assert len(events_of(name)) == count


def test_ybinlogp_acceptance_shape() -> None:
    events = events_of("ybinlogp/mysql-bin.default-path")
    assert len(events) == 39
    last = events[-1].body
    assert isinstance(last, RotateEvent) and (last.next_file, last.position) == ("mysql-bin.000008", 4)
    assert isinstance(events[-2].body, XidEvent)


def test_aurora_padding_is_skipped_as_ignorable() -> None:
    events = events_of("mysql-binlog-connector-java/mysql-bin.aurora-padding")
    assert [e.pos for e in events] == [4, 185, 216, 281, 1209]
    assert events[3].header.type_code == 100


def test_mariadb_rotate_name_has_no_checksum_bytes() -> None:
    # canal #1081 printed a MariaDB ROTATE's trailing CRC32 as part of the next file's name.
    for entry in FILES:
        if "MariaDB" not in entry.version or entry.may_fail:
            continue
        for event in events_of(entry.name):
            if isinstance(event.body, RotateEvent):
                assert event.body.next_file.isprintable(), entry.name


@pytest.mark.parametrize(
    ("name", "error", "pos"),
    [
        ("mysql-server/mysql-test/std_data/binlog_recovery/duplicate_xid.000001", ChecksumMismatchError, 672),
        ("mariadb-server/mysql-test/std_data/mdev-39404-binlog.000001", ChecksumMismatchError, 256),
        ("mysql-server/mysql-test/std_data/binlog_truncated_prev_gtid_event.000001", TruncatedBinlogError, 120),
        ("mariadb-server/mysql-test/std_data/bug11747416_32228_binlog.000001", TruncatedBinlogError, 316),
        ("mariadb-server/mysql-test/std_data/binlog_before_20574.bin", UnsupportedBinlogError, 256),
        ("mysql-server/mysql-test/std_data/rpl_nogtid_encryption_master-bin.000002", UnsupportedBinlogError, 0),
        ("mariadb-server/mysql-test/std_data/master-bin.000001", UnsupportedBinlogError, 4),
    ],
)
def test_bad_files_raise_typed_errors_naming_the_place(name: str, error: type[Exception], pos: int) -> None:
    with pytest.raises(error) as info:
        events_of(name)
    assert isinstance(info.value, BinlogDecodeError)
    assert info.value.pos == pos
    assert info.value.file == name.rsplit("/", 1)[1]


def test_encrypted_mariadb_binlog_says_so() -> None:
    with pytest.raises(UnsupportedBinlogError, match="encrypted binlogs are not supported"):
        events_of("mariadb-server/mysql-test/std_data/binlog_before_20574.bin")


def test_truncated_file_says_where_it_ends() -> None:
    with pytest.raises(TruncatedBinlogError, match="file ends at byte 8192, inside a 65567-byte event starting at 316"):
        events_of("mariadb-server/mysql-test/std_data/bug11747416_32228_binlog.000001")


def test_start_and_stop_positions() -> None:
    name = "mysql-binlog-connector-java/mysql-bin.checksum-crc32"
    every = events_of(name)
    # Start at a transaction boundary (an ANONYMOUS_GTID), as resume positions always are.
    first = next(i for i, e in enumerate(every) if i >= 100 and isinstance(e.body, GtidEvent))
    later = events_of(name, start_position=every[first].pos, stop_position=every[first + 10].pos)
    assert [e.pos for e in later] == [every[0].pos] + [e.pos for e in every[first : first + 10]]
    assert [e.body for e in later[1:]] == [e.body for e in every[first : first + 10]]


def test_flat_messages_of_a_file_carry_canal_fields() -> None:
    out = io.StringIO()
    decode_files([str(CORPUS / "rust_mysql_common/mysql-enum-string-set.000001")], out)
    messages = [json.loads(line) for line in out.getvalue().splitlines()]
    dml = [m for m in messages if not m["isDdl"] and m["type"] != "QUERY"]
    assert [m["type"] for m in dml] == ["INSERT", "UPDATE", "DELETE"]
    update = dml[1]
    assert update["data"][0]["f3"] == "variant2" and update["data"][0]["f4"] == "two,four"
    assert set(update["old"][0]) <= set(update["data"][0])
    assert update["mysqlType"]["f3"] == "enum('var1','variant2','foo')"
    assert update["source"]["file"] == "mysql-enum-string-set.000001" and update["source"]["row"] == 0
    assert update["gtid"].startswith("93e95066-a2f4-11ec-9b69-9657f0ae95e2:")
    canal_fields = "database table type isDdl pkNames es ts sql sqlType mysqlType data old gtid source"
    assert set(canal_fields.split()) == set(update)
    ddl = [m for m in messages if m["isDdl"]]
    assert ddl[0]["type"] == "CREATE" and ddl[0]["table"] == "t" and ddl[0]["data"] is None


def test_rows_kind_names() -> None:
    assert RowsKind.WRITE.name == "WRITE"


@pytest.mark.parametrize("name", sorted(p.name for p in (CORPUS / "mysql-cdc-rs").glob("8.0_*_dump.txt")))
def test_rows_match_mysql_8_dumps(name: str) -> None:
    """`mysqlbinlog -vvvvvv` output of MySQL 8.2/8.0.31 files, stored as UTF-16LE with CRLF."""
    text = (CORPUS / "mysql-cdc-rs" / name).read_bytes().decode("utf-16")
    expected = verbose_rows(text)
    (binlog,) = (CORPUS / "mysql-cdc-rs").glob(name.replace("_dump.txt", "_binlog.*"))
    assert verbose_lines(rows_events(events_of(f"mysql-cdc-rs/{binlog.name}"))) == expected


@pytest.mark.parametrize("entry", [f for f in FILES if not f.may_fail], ids=lambda f: f.name)
def test_tables_the_filters_exclude_are_read_only_up_to_their_names(entry: CorpusFile) -> None:
    # A table the connector does not capture must not be able to stop it: its TABLE_MAP's
    # columns and metadata are never decoded, and its rows are skipped unread.
    parser = BinlogParser(entry.name)
    parser.table_filter = lambda database, table: False
    for event in iter_file_events(str(entry.path), parser=parser):
        if isinstance(event.body, TableMapEvent):
            assert event.body.columns == () and event.body.table
        elif isinstance(event.body, RowsEvent) and event.body.table is not None:
            assert not event.body.decoded and event.body.rows == ()


def test_json_lines_of_a_rows_event_at_once_are_its_messages_one_by_one() -> None:
    """`sluice decode` writes a rows event's lines at once (JsonLineEncoder.lines); they are the
    lines of its messages, each encoded alone, for every row event of every corpus file. And
    the generated renderer of a whole image (TableShape.whole) renders as the columns' own."""
    encoder, compared = JsonLineEncoder(), {kind: 0 for kind in RowsKind}
    for entry in FILES:
        builder = FlatMessageBuilder(Offset.of(entry.path.name), clock=lambda: 1.5, query=WHOLE_QUERIES)
        try:
            for event in iter_file_events(str(entry.path)):
                for item in builder.feed_batched(event):
                    if isinstance(item, RowBatch):
                        shape = item.shape  # the generated renderer of whole images is the columns' own
                        for image in (i for pair in item.rows.rows for i in pair if i is not None):
                            one_by_one = {shape.names[i]: shape.renderers[i](v) for i, v in enumerate(image)}
                            if len(image) == len(shape.names):
                                assert shape.whole(image) == one_by_one
                                assert shape.whole_json(image) == encoder.encode(one_by_one)
                        for before, after in item.rows.rows if item.rows.kind == RowsKind.UPDATE else ():
                            assert before is not None and after is not None
                            if len(before) == len(after) == len(shape.names):  # `old`: the texts that differ
                                old, new = shape.whole(before), shape.whole(after)
                                changed = {k: v for k, v in old.items() if new[k] != v}
                                assert flat._changed(shape, before, after) == changed
                                assert list(flat._changed(shape, before, after)) == list(changed)
                        expected = "".join(encoder.encode(m) + "\n" for m in item.messages())
                        assert encoder.lines(item) == expected, (entry.name, event.pos)
                        compared[item.rows.kind] += len(item.rows.rows)
        except BinlogDecodeError:
            assert entry.may_fail, entry.name
    assert min(compared.values()) > 1000, compared  # 66,284 rows, of every kind


def test_the_compiled_json_of_a_rows_event_is_its_messages_one_by_one() -> None:
    """The compiled renderer (connector/csrc/canaltext.c, what `sluice decode` writes with): on every
    rows event of the corpus whose images it takes, its lines are those of the messages the Python
    decoders and renderers make, encoded one by one; where it declines, the Python path's are."""
    compiled = rows = 0
    for entry in FILES:
        encoder = JsonLineEncoder()
        builder = FlatMessageBuilder(Offset.of(entry.path.name), clock=lambda: 1.5, query=WHOLE_QUERIES)
        parser = BinlogParser(entry.path.name)
        parser.raw_rows = True  # the images kept as bytes where they walk, as decode_files has them
        try:
            for event in iter_file_events(str(entry.path), parser=parser):
                for item in builder.feed_batched(event):
                    if isinstance(item, RowBatch):
                        expected = "".join(encoder.encode(m) + "\n" for m in item.messages())
                        assert encoder.lines(item) == expected, (entry.name, event.pos)
                        rows += len(item.rows.rows)
        except BinlogDecodeError:
            assert entry.may_fail, entry.name
        compiled += encoder.compiled_rows
    assert compiled > 10_000 and rows > 60_000, (compiled, rows)  # 10,581 of 66,284: older types and charsets


def test_the_generated_renderers_keep_a_dict_s_meaning_and_json_s_escapes() -> None:
    """TableShape.whole and whole_json on what the corpus has few of: a repeated name (the dict
    keeps the last value in the first one's place), names and values that JSON must escape, a
    renderer that is not inlined, no columns at all."""
    text, year = coltypes.render_text, coltypes.TYPES[ColumnType.MYSQL_TYPE_YEAR].render
    integer, decimal = coltypes.render_int, coltypes.render_decimal
    names = ("a", 'q"\\', "a", "ü\n", "y", "{j0}}", "n")
    render, render_json = whole_renderers(names, (text, text, text, text, year, integer, decimal))
    image = ("x", 'v"\\\u2028', None, "é\t\x00", 7, -3, Decimal("-0.50"))
    expected = {"a": None, 'q"\\': 'v"\\\u2028', "ü\n": "é\t\x00", "y": "0007", "{j0}}": "-3", "n": "-0.50"}
    assert render(image) == expected and list(render(image)) == list(expected)
    assert render_json(image) == json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
    empty, empty_json = whole_renderers((), ())
    assert empty(()) == {} and empty_json(()) == "{}"


def test_an_update_s_old_holds_the_columns_whose_text_changed() -> None:
    """flat._changed skips equal values of classes whose text equality follows; a float's
    -0.0 equals 0.0 but prints apart, and a repeated name compares its last column."""
    double = coltypes.TYPES[ColumnType.MYSQL_TYPE_DOUBLE].render
    text, integer = coltypes.render_text, coltypes.render_int
    names, renderers = ("a", "f", "a", "n", "b"), (text, double, integer, integer, coltypes.render_plain)
    shape = flat.TableShape(names, renderers, None, {}, {}, *whole_renderers(names, renderers),
                            {name: i for i, name in enumerate(names)})  # fmt: skip
    before = ("x", 0.0, 1, None, b"\xff")
    assert flat._changed(shape, before, ("y", -0.0, 1, None, b"\xff")) == {"f": "0.0"}
    assert flat._changed(shape, before, ("x", 0.0, 2, 5, b"\xfe")) == {"a": "1", "n": None, "b": "\xff"}
    assert flat._changed(shape, before, before) == {}
