"""Issue 17: the compiled kernel (connector/lane.py) on whole dump sessions, without services.

Every corpus case of the fuzzer (tests/fuzz/session.py) read as a session twice, with the kernel
and on the Python path alone: the messages, saved positions and errors are the same, and the
kernel wrote both transactions' rows wherever the compiled transcoder covers the table (the
first too: the Python path decodes its BEGIN and TABLE_MAP and teaches them where the kernel
stopped, and the kernel goes on with the transaction).
The fuzzer mutates these same sessions under the sanitizers (tests/test_native_fuzz.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator

import pytest
import zstandard

from connector import lane
from connector.avro import encoding
from connector.binlog import constants as c
from connector.canal import CanalJsonEncoder
from connector.native import transcoder
from connector.pipeline import Options
from tests.fuzz import rig, session
from tests.fuzz.session import Input


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[rig.Case]:
    if transcoder is None:
        pytest.fail("the compiled module is not built (make install)")
    return rig.load_cases(tmp_path_factory.mktemp("lane-cases"))



def _inputs(cases: list[rig.Case]) -> Iterator[Input]:
    """Every seed of the session fuzzer, decoded (tests/fuzz/session.seeds)."""
    for seed in session.seeds(cases):
        inp = session.decode(cases, seed)
        assert inp is not None
        yield inp

def test_every_case_reads_the_same_with_the_kernel_and_without(cases: list[rig.Case]) -> None:
    taken = errors = 0
    for inp in _inputs(cases):
        outcome = session.check(inp)
        taken += outcome.kernel_rows > 0
        errors += outcome.error is not None
        # what the kernel takes, it takes from the first transaction on: none is left to Python
        assert outcome.kernel_rows in (0, outcome.rows), (inp.case.file, outcome)
    # the kernel wrote the rows of every case whose columns the compiled transcoder covers
    # (not pre-5.6 temporals, latin1 text, ENUM, ...: sakila's, mdev6020's)
    assert taken >= 50, (taken, len(cases))
    assert errors < len(cases) // 2, errors


def test_a_stream_cut_into_single_bytes_reads_the_same(cases: list[rig.Case]) -> None:
    """Every packet arrives a byte at a time: the kernel waits for whole packets, and takes them."""
    cut = 0
    for inp in list(_inputs(cases))[::2]:
        whole = session.check(inp)
        if whole.kernel_rows and cut < 4:
            bytewise = session.check(dataclasses.replace(inp, chunks=(1,)))
            assert bytewise.kernel_rows == whole.kernel_rows and bytewise.same(whole)
            cut += 1
    assert cut == 4


def test_packets_longer_than_the_read_buffer_are_the_kernels_too(cases: list[rig.Case]) -> None:
    """A read buffer of 64 bytes, shorter than nearly every event and every TRANSACTION_PAYLOAD: it
    grows to hold each packet the kernel waits for, so the kernel takes what it takes through the
    usual buffer, and the session ends alike (a compressed transaction's payload holds all of it:
    a 20,000-row UPDATE is MiBs of one packet)."""
    grown = compressed = 0
    for inp in list(_inputs(cases))[::3]:
        usual = session.check(inp)
        if not usual.kernel_rows:
            continue
        small = session.check(dataclasses.replace(inp, buffer=64))
        assert small.kernel_rows == usual.kernel_rows and small.same(usual), inp.case.file
        grown += 1
        compressed += inp.compressed
    assert grown >= 20 and compressed >= 5, (grown, compressed)


def test_compressed_transactions_are_the_kernels_as_the_same_transactions_plain(cases: list[rig.Case]) -> None:
    """binlog_transaction_compression: each transaction after its GTID in a zstd TRANSACTION_PAYLOAD.
    The kernel takes the second payload wherever it takes the second plain transaction, and the
    session ends as the Python path's (its rows numbered across the payload's events, at its position)."""
    compared = taken = 0
    for inp in _inputs(cases):
        if not inp.compressed:
            continue
        compressed = session.check(inp)
        plain = session.check(dataclasses.replace(inp, compressed=False))
        assert compressed.kernel_rows == plain.kernel_rows, inp.case.file
        compared += 1
        taken += compressed.kernel_rows > 0
    assert compared >= 30 and taken >= 20, (compared, taken)


def test_compressed_transactions_read_alike_whichever_decompressor_inflates_them(
    cases: list[rig.Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel inflates a payload with the system's libzstd where it can, else with the parser's
    decompressor (a call into Python): the same sessions either way, taken by the kernel alike."""
    compared = 0
    for inp in list(_inputs(cases))[::2]:
        if not inp.compressed:
            continue
        monkeypatch.setattr(lane, "NATIVE_INFLATE", True)
        native = session.check(inp)
        monkeypatch.setattr(lane, "NATIVE_INFLATE", False)
        python = session.check(inp)
        assert native.kernel_rows == python.kernel_rows and native.same(python), inp.case.file
        compared += native.kernel_rows > 0
    assert compared >= 10, compared


def _fields(body: bytes) -> tuple[dict[int, int], bytes]:
    """A TRANSACTION_PAYLOAD body's header fields and the rest (tests/fuzz/session.payload writes
    every value in one byte or three)."""
    fields, at = {}, 0
    while body[at] != c.OTW_PAYLOAD_HEADER_END_MARK:
        field, size = body[at], body[at + 1]
        value = body[at + 2 + (size > 1) : at + 2 + size]
        fields[field] = int.from_bytes(value, "little")
        at += 2 + size
    return fields, body[at + 1 :]


def _rebuilt(
    body: bytes, change: Callable[[bytes], bytes], compression: int = c.PAYLOAD_COMPRESSION_ZSTD, more: int = 0
) -> bytes:  # fmt: skip
    """The payload with its events' bytes changed, its header made to fit them (but for `more`
    bytes added to the uncompressed size it gives)."""
    _, frame = _fields(body)
    inner = change(zstandard.ZstdDecompressor().decompress(frame))
    data = zstandard.ZstdCompressor().compress(inner) if compression == c.PAYLOAD_COMPRESSION_ZSTD else inner
    return session.payload_header(compression, len(inner) + more, len(data)) + data


def _events(inner: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(inner):
        length = int.from_bytes(inner[at + 9 : at + 13], "little")
        out.append(inner[at : at + length])
        at += length
    return out


def _retyped(event: bytes, type_code: int) -> bytes:
    return event[:4] + bytes([type_code]) + event[5:]


def _changed(change: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """A fault of the payload's events, the payload made again around them."""
    return lambda body: _rebuilt(body, change)


def _event_too_long(inner: bytes) -> bytes:
    *first, last = _events(inner)
    return b"".join(first) + last[:9] + (200).to_bytes(4, "little") + last[13:]


# Each turns the second transaction's payload body into one the kernel must read as the Python
# path does: take it whole, or leave all of it (the parser's error, or its reading of it, decides).
PAYLOAD_FAULTS: dict[str, Callable[[bytes], bytes]] = {
    "as written": lambda body: body,
    "stored, not compressed": lambda body: _rebuilt(body, lambda inner: inner, c.PAYLOAD_COMPRESSION_NONE),
    "an unknown compression": lambda body: bytes([body[0], body[1], 7]) + body[3:],
    "frame cut short": lambda body: body[:-1],
    "bytes after the frame": lambda body: body + b"\x00",
    "uncompressed size one more": lambda body: _rebuilt(body, lambda inner: inner, more=1),
    "uncompressed size one less": lambda body: _rebuilt(body, lambda inner: inner, more=-1),
    "no end mark": lambda body: body[: body.index(b"\x00", 6)],
    "no XID": _changed(lambda inner: b"".join(_events(inner)[:-1])),
    "two XIDs": _changed(lambda inner: inner + _events(inner)[-1]),
    "an event shorter than a header": _changed(lambda inner: inner + bytes(9) + (5).to_bytes(4, "little") + bytes(6)),
    "an event longer than the rest": _changed(_event_too_long),
    "a GTID inside": _changed(lambda inner: _retyped(_events(inner)[0], c.EventType.GTID_LOG_EVENT) + inner),
    "a payload inside": _changed(lambda inner: _retyped(inner, c.EventType.TRANSACTION_PAYLOAD_EVENT)),
    "the rows event's type unknown": _changed(
        lambda inner: b"".join(_retyped(e, 0xEE) if e[4] in rig.ROWS_TYPES else e for e in _events(inner))
    ),
}


def _flipped(at: int, change: int) -> Callable[[bytes], bytes]:
    return lambda body: body[:at] + bytes([body[at] ^ change]) + body[at + 1 :]


def test_a_damaged_payload_reads_as_on_the_python_path(cases: list[rig.Case]) -> None:
    """Every fault of PAYLOAD_FAULTS, and every header byte changed, on sessions the kernel takes
    compressed: the same messages, position and error with the kernel as without."""
    taken: list[Input] = []
    for inp in _inputs(cases):
        if inp.compressed and len(taken) < 3 and session.check(inp).kernel_rows:
            taken.append(inp)
    assert len(taken) == 3
    for inp in taken:
        kernel_rows = {name: session.check(inp, fault).kernel_rows for name, fault in PAYLOAD_FAULTS.items()}
        assert kernel_rows["as written"] and kernel_rows["stored, not compressed"] == kernel_rows["as written"]
        declined = {name for name, rows in kernel_rows.items() if rows < kernel_rows["as written"]}
        assert declined == set(PAYLOAD_FAULTS) - {"as written", "stored, not compressed"}, declined
        for at in range(10):  # the header's fields and end mark
            for change in (1, 0x80, 0xFF):
                session.check(inp, _flipped(at, change))


def test_a_column_rule_s_tables_are_compiled_to_the_per_message_path_s_bytes(
    cases: list[rig.Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """[[kafka.columns]] (issue 33): a rule that leaves a column out, masks one and hashes one, and one
    that masks or hashes key columns. The kernel's messages and the compiled transcoder's (the Python
    path's reading, which defers the images) are those the per-message path writes (the compiled
    code given no program for a rule's table, under rules of its own so that no plan made before is
    found: what a rule's table took before), for every corpus case, in both servers' charsets; and
    the kernel wrote them."""
    taken = ruled = keyed = 0
    for inp in _inputs(cases):
        for make in (session.rules, session.key_rules):
            rules = make(inp.case)
            if rules is None:
                continue
            ruled += 1
            options = Options(columns=rules)
            outcome = session.check(inp, options=options)  # the kernel's == the transcoder's
            fresh = make(inp.case)
            assert fresh is not None
            with monkeypatch.context() as patched:
                patched.setattr(encoding, "shaped_program", lambda *args: "declined")
                reference = session.read(inp, False, options=Options(columns=fresh))
            assert reference.kernel_rows == 0 and outcome.same(reference), (inp.case.file, outcome, reference)
            taken += outcome.kernel_rows > 0
            keyed += make is session.key_rules and outcome.kernel_rows > 0
    assert ruled >= 100 and taken >= 80 and keyed >= 40, (ruled, taken, keyed)


def test_transaction_records_are_written_from_the_kernel_s_bursts(
    cases: list[rig.Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transaction records (issue 33) no longer keep the kernel off: it takes the rows, and says each
    transaction's part of a burst, from which the pipeline writes the BEGIN and END records the
    Python path writes (session.check compares every message). Each case with records on, as it is,
    compressed (MySQL), and with bursts of one message, so that a transaction's rows and its XID
    come in different bursts."""
    taken = 0
    for inp in _inputs(cases):
        if not inp.records:
            continue
        outcome = session.check(inp)
        if not outcome.kernel_rows:
            continue
        taken += 1
        records = [json.loads(value or b"") for _, value in outcome.messages[(session.RECORDS, 0)]]
        assert [r["status"] for r in records] == ["BEGIN", "END"] * 2, records
        assert records[0]["id"] == records[1]["id"] != records[2]["id"] == records[3]["id"]
        half = outcome.rows // 2  # both transactions carry the same rows event
        assert [r["event_count"] for r in records[1::2]] == [half, half]
        assert [len(r["data_collections"]) for r in records[1::2]] == [1, 1]
        if not inp.case.mariadb:
            assert session.check(dataclasses.replace(inp, compressed=True)).kernel_rows == outcome.kernel_rows
        with monkeypatch.context() as patched:
            patched.setattr(lane, "MAX_MESSAGES", 1)
            assert session.check(inp).kernel_rows == outcome.kernel_rows
    assert taken >= 40, taken


def test_canal_json_rows_are_compiled_to_the_per_message_path_s_bytes(
    cases: list[rig.Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """canal-json (issue 33): every corpus session's messages, with `old` the changed columns and the
    whole before image, are byte for byte those of the Python path's per-message encoding (the
    compiled code patched out), and the compiled code wrote the rows of most cases."""
    compiled = sessions = 0
    for inp in _inputs(cases):
        for old in ("changed", "full"):
            encoder = CanalJsonEncoder(None, "row", old)  # type: ignore[arg-type]
            outcome = session.read(inp, False, encoder=encoder)
            with monkeypatch.context() as patched:
                patched.setattr(CanalJsonEncoder, "compiled", lambda *args: None)
                reference = session.read(
                    inp, False, encoder=CanalJsonEncoder(None, "row", old)  # type: ignore[arg-type]
                )
            assert outcome.same(reference), (inp.case.file, old, outcome, reference)
            sessions += 1
            compiled += encoder.compiled_rows > 0
    assert compiled >= sessions // 2, (compiled, sessions)


def test_canal_json_under_a_column_rule_is_compiled_to_the_per_message_path_s_bytes(
    cases: list[rig.Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """canal-json under [[kafka.columns]] (issue 33): the rules of the Avro test above (a column left
    out, one masked, one hashed; key columns masked and hashed), `old` changed and whole. The kernel's
    messages and the compiled transcoder's are those the per-message path writes (the compiled code
    patched out: each change shaped by connector/columns.py, then encoded), for every corpus case; and
    the kernel wrote most of them."""
    taken = ruled = keyed = 0
    for inp in _inputs(cases):
        for make in (session.rules, session.key_rules):
            for old, rows in (("changed", "row"), ("full", "row"), ("changed", "event")):
                rules, fresh = make(inp.case), make(inp.case)  # each read its own: no plan made before is found
                if rules is None or fresh is None:
                    continue
                ruled += 1
                outcome = session.check_canal(inp, old, options=Options(columns=rules), rows=rows)
                with monkeypatch.context() as patched:
                    patched.setattr(CanalJsonEncoder, "compiled", lambda *args: None)
                    encoder = CanalJsonEncoder(None, rows, old)  # type: ignore[arg-type]
                    reference = session.read(inp, False, options=Options(columns=fresh), encoder=encoder)
                assert outcome.same(reference), (inp.case.file, old, rows, outcome, reference)
                taken += outcome.kernel_rows > 0
                keyed += make is session.key_rules and outcome.kernel_rows > 0
    assert ruled >= 900 and taken >= ruled * 2 // 3 and keyed >= 240, (ruled, taken, keyed)


def test_canal_json_messages_of_a_rows_event_are_compiled_to_the_python_path_s(
    cases: list[rig.Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    """canal-json's message_rows = "event" (issue 33): every corpus session, with `old` changed and
    whole, reads the same with the kernel as on the Python path (whose compiled code writes the
    event's message: `check_canal`), and the same as the Python path's per-event documents (the
    compiled code patched out); the kernel wrote most of them."""
    taken = sessions = 0
    for inp in _inputs(cases):
        for old in ("changed", "full"):
            outcome = session.check_canal(inp, old, rows="event")
            with monkeypatch.context() as patched:
                patched.setattr(CanalJsonEncoder, "compiled", lambda *args: None)
                encoder = CanalJsonEncoder(None, "event", old)  # type: ignore[arg-type]
                reference = session.read(inp, False, encoder=encoder)
            assert outcome.same(reference), (inp.case.file, old, outcome, reference)
            sessions += 1
            taken += outcome.kernel_rows > 0
    assert taken >= sessions * 2 // 3, (taken, sessions)


def test_canal_json_sessions_read_the_same_with_the_kernel_and_without(cases: list[rig.Case]) -> None:
    """canal-json on the kernel (issue 33): every corpus session, with `old` changed and whole, reads
    the same messages, positions and errors with the kernel as on the Python path alone (whose rows
    the compiled code writes: held to the per-message path above); and the kernel wrote the rows of
    most of them."""
    taken = sessions = 0
    for inp in _inputs(cases):
        for old in ("changed", "full"):
            with_kernel = session.check_canal(inp, old)
            sessions += 1
            taken += with_kernel.kernel_rows > 0
            assert with_kernel.kernel_rows in (0, with_kernel.rows), (inp.case.file, with_kernel)
    assert taken >= sessions // 2, (taken, sessions)
