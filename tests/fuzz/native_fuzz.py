"""Coverage-guided fuzzing (atheris, libFuzzer) of the compiled module on `sluice run`'s path.

Each input is a corpus TABLE_MAP and rows event with mutated bodies (tests/fuzz/rig.py), taken
through the parser (typed rows on), the assembler and the pipeline exactly as a run takes them,
with the sanitizer build (tests/fuzz/build.py) imported as connector._transcode. An input must
be written, or end in one of the project's typed errors (rig.EXPECTED); anything else is a
finding: another exception (a Python error, or the compiled bytes differing from Python's), an
AddressSanitizer or UBSan report, a hang (libFuzzer's -timeout). libFuzzer writes the input
that found it where -artifact_prefix says.

    LD_PRELOAD=<build's runtime> SLUICE_FUZZ_MODULE=<build's .so> \\
        python -m tests.fuzz.native_fuzz --seeds=DIR --work=DIR [libFuzzer flags] DIR...

--python-coverage=off leaves the connector's Python uninstrumented (for -runs=0: nothing to guide).

--seeds=DIR writes the seed inputs (every case, unmutated, and the regression inputs) into DIR
first; --work=DIR is where the encoders keep their schema directories. tests/test_native_fuzz.py
runs it (see build.environment).

--target=session fuzzes whole dump sessions instead (tests/fuzz/session.py): the same cases as
two transactions in the dump's packets, cut anywhere, read with the compiled kernel taking what
it can and on the Python path alone; the two must end alike, message for message, position for
position, error for error.

--target=boundary fuzzes the module's boundary instead: `transcode`, `count_rows`, `route`,
`render_json`, `canal_json` and a `Kernel`, called directly with any arguments. Production hands
them only the programs and walk layouts that connector/binlog/rowplan.py makes, and the module checks them anyway
(program_ok, walk_ok, route's checks) rather than trust them: every call returns or raises
ValueError (TypeError for a message that is not a pair of bytes), under the sanitizers.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import struct
import sys
import tempfile
import zlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import atheris

import connector
from tests.fuzz.build import MODULE


def load_sanitized(path: Path) -> ModuleType:
    """The build at `path` as connector._transcode, before anything imports the normal one."""
    if "connector.native" in sys.modules or "connector._transcode" in sys.modules:
        raise RuntimeError("the compiled module was imported before the sanitizer build could take its place")
    spec = importlib.util.spec_from_file_location("connector._transcode", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not an extension module")
    module = importlib.util.module_from_spec(spec)
    sys.modules["connector._transcode"] = module
    spec.loader.exec_module(module)
    connector.__dict__["_transcode"] = module  # what `from connector import _transcode` finds
    return module


def instrumented(path: Path) -> bool:
    """Is the file built with AddressSanitizer and UBSan (their hooks are among its symbols)?"""
    data = path.read_bytes()
    return b"__asan_report_load" in data and b"__ubsan_handle_" in data


def _option(args: list[str], name: str) -> tuple[list[str], str | None]:
    """`args` without --name=VALUE, and VALUE."""
    found = [a for a in args if a.startswith(f"--{name}=")]
    return [a for a in args if a not in found], found[-1].split("=", 1)[1] if found else None


def main(argv: list[str]) -> None:
    path = Path(os.environ[MODULE]).resolve()
    if not instrumented(path):
        raise SystemExit(f"{path} is not a sanitizer build (tests/fuzz/build.py makes one)")
    module = load_sanitized(path)
    argv, target = _option(argv, "target")
    if target == "boundary":
        print(f"native_fuzz: the boundary of {path}", file=sys.stderr, flush=True)
        from connector.binlog.rowplan import code_table_number  # noqa: PLC0415 - after the swap, as below

        assert code_table_number("gbk") == GBK  # GOOD_COLUMNS' and GOOD_WALKS' code tables
        assert code_table_number("ujis", mariadb=False) == UJIS
        assert code_table_number("gb18030", mariadb=False) == GB18030
        atheris.Setup(argv, lambda data: boundary(module, data))
        atheris.Fuzz()
        return
    argv, seeds_dir = _option(argv, "seeds")
    argv, work = _option(argv, "work")
    argv, python_coverage = _option(argv, "python-coverage")
    # The Python's coverage guides mutation only: a run of the seeds alone (-runs=0, the planted
    # bugs' runs) finds what it finds without it, in a fifth of the start-up.
    with atheris.instrument_imports(include=["connector"]) if python_coverage != "off" else contextlib.nullcontext():
        from connector import native  # noqa: PLC0415 - after the swap, so that it finds the sanitizer build
        from connector.pipeline import NO_OPTIONS, Options  # noqa: PLC0415 - the same
        from tests.fuzz import rig, session  # noqa: PLC0415 - the same: they import the connector's modules

    # The production modules hold the sanitizer build: no side door, no second copy.
    assert native.transcoder is module and Path(str(module.__file__)).resolve() == path, native.transcoder
    cases = rig.load_cases(Path(work or tempfile.mkdtemp(prefix="sluice-fuzz-")))
    print(f"native_fuzz: {len(cases)} cases, module {path}, {target or 'events'}", file=sys.stderr, flush=True)
    seeds = session.seeds(cases) if target == "session" else rig.seeds(cases)
    # Every code table learnt before the first input, as a long run has them: building one is a
    # hundred thousand codes of instrumented Python, longer than an input may take (-timeout), so
    # the first input to name a charset would be reported as a hang.
    from connector.binlog.rowplan import code_table_number  # noqa: PLC0415 - instrumented, as above
    from connector.native_spec import CODE_TABLES  # noqa: PLC0415

    for name in CODE_TABLES:
        charset, _, server = name.partition(".")
        assert code_table_number(charset, mariadb=server == "mariadb") == CODE_TABLES.index(name), name
    if seeds_dir is not None:
        Path(seeds_dir).mkdir(parents=True, exist_ok=True)
        for n, seed in enumerate(seeds):
            (Path(seeds_dir) / f"seed-{n:03d}").write_bytes(seed)

    def one_input(data: bytes) -> None:
        decoded = rig.decode(cases, data)
        if decoded is not None:
            rig.run(*decoded)

    def one_session(data: bytes) -> None:
        decoded = session.decode(cases, data)
        if decoded is not None:
            session.check(decoded)
            # both formats, each input; canal-json under a [[kafka.columns]] rule every other input, and
            # a message per rows event every third
            rules = session.rules(decoded.case) if len(data) % 2 else None
            options = NO_OPTIONS if rules is None else Options(columns=rules)
            rows = "event" if len(data) % 3 == 0 else "row"
            session.check_canal(decoded, "full" if decoded.records else "changed", options=options, rows=rows)

    atheris.Setup(argv, one_session if target == "session" else one_input)
    atheris.Fuzz()


# Values around every limit the module checks; widths, lengths and branches are int32.
EDGES = [-(2**31), -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 38, 39, 255, 256, 0xFFFF, 0x10000, 2**31 - 1]


def boundary(module: ModuleType, data: bytes) -> None:
    """One call of the module with arguments made of `data`: it returns, or refuses them."""
    fdp = atheris.FuzzedDataProvider(data)
    with contextlib.suppress(ValueError):
        (_transcode, _count_rows, _route, _kernel, _render_json, _learn, _canal_json)[fdp.ConsumeIntInRange(0, 6)](
            module, fdp
        )


def _int(fdp: atheris.FuzzedDataProvider) -> int:
    return int(fdp.PickValueInList(EDGES)) if fdp.ConsumeBool() else int(fdp.ConsumeIntInRange(-3, 40))


def _transcode(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    program = _program(fdp)
    keys = b"".join(struct.pack("<3i", *(_int(fdp) for _ in range(3))) for _ in range(fdp.ConsumeIntInRange(0, 3)))
    kind = fdp.ConsumeIntInRange(-1, 3)
    base = int(fdp.PickValueInList([0, 1, 7, -1, 2**62, 2**63 - 1]))
    parts = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8)) for _ in range(6)]  # key prefix .. tail
    module.transcode(fdp.ConsumeBytes(fdp.remaining_bytes()), program, kind, keys, _strings(fdp), *parts, base)


def _render_json(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    program = _program(fdp)
    kind = fdp.ConsumeIntInRange(-1, 3)
    count = max(0, len(program) // 28 + fdp.ConsumeIntInRange(-1, 1))  # a name per column, or one too few or many
    names = tuple(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 6)) for _ in range(count))
    module.render_json(fdp.ConsumeBytes(fdp.remaining_bytes()), program, kind, _strings(fdp), names)


def _canal_json(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    program = _program(fdp)
    kind = fdp.ConsumeIntInRange(-1, 3)
    keys = b"".join(struct.pack("<3i", *(_int(fdp) for _ in range(3))) for _ in range(fdp.ConsumeIntInRange(0, 3)))
    count = max(0, len(program) // 28 + fdp.ConsumeIntInRange(-1, 1))  # a name and sqlType per column, or not
    types = b"".join(struct.pack("<3i", *(_int(fdp) for _ in range(3))) for _ in range(count))
    names = _strings(fdp) if fdp.ConsumeBool() else _names(count, fdp)
    parts = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8)) for _ in range(4)]  # middle .. tail
    full_old, per_event = fdp.ConsumeBool(), fdp.ConsumeBool()
    module.canal_json(fdp.ConsumeBytes(fdp.remaining_bytes()), program, kind, keys, _strings(fdp), names, types,
                      full_old, *parts, per_event)  # fmt: skip


def _names(count: int, fdp: atheris.FuzzedDataProvider) -> bytes:
    from connector.binlog.rowplan import Strings  # noqa: PLC0415 - after the sanitizer build took its place

    strings = Strings()
    strings.add([fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 6)) for _ in range(count)])
    return strings.packed()


def _program(fdp: atheris.FuzzedDataProvider) -> bytes:
    """Up to four columns, each one the kernel's plans are made of or any ints, with any flags or
    those COLUMN_FLAGS has (a [[kafka.columns]] rule's too)."""
    columns = [list(fdp.PickValueInList(GOOD_COLUMNS)) if fdp.ConsumeBool() else [_int(fdp) for _ in range(6)]
               for _ in range(fdp.ConsumeIntInRange(0, 4))]  # fmt: skip
    return b"".join(struct.pack("<7i", *c, _flags(fdp) if fdp.ConsumeBool() else _int(fdp)) for c in columns)


# A column's flags (native_spec.COLUMN_FLAGS): none, COL_ASCII, COL_DROP, COL_MASK or COL_HASH with
# its string 0, 1 or 3 (flags >> COL_STRING_SHIFT), two at once, a string without either, no such
# flag, negative.
FLAGS = [0, 1, 2, 4, 4 | 1 << 8, 4 | 3 << 8, 8, 8 | 1 << 8, 8 | 3 << 8, 1 | 4, 2 | 4, 4 | 8, 2 | 8, 1 << 8, 16, -1]


def _flags(fdp: atheris.FuzzedDataProvider) -> int:
    return int(fdp.PickValueInList(FLAGS))


def _strings(fdp: atheris.FuzzedDataProvider) -> bytes:
    """A program's strings: well made (labels, a charset's 256 characters) or any bytes."""
    if fdp.ConsumeBool():
        return bytes(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 24)))
    texts = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 3)) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    if fdp.ConsumeBool():
        texts += [bytes([i]) if i < 0x80 else b"" for i in range(256)]  # an ASCII table, the rest unmapped
    from connector.binlog.rowplan import Strings  # noqa: PLC0415 - after the sanitizer build took its place

    strings = Strings()
    strings.add(texts)
    return strings.packed()


def _count_rows(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    walks = [fdp.PickValueInList(GOOD_WALKS) if fdp.ConsumeBool() else [_int(fdp) for _ in range(4)]
             for _ in range(fdp.ConsumeIntInRange(0, 4))]  # fmt: skip
    layout = b"".join(struct.pack("<4i", *walk) for walk in walks)
    images = fdp.ConsumeIntInRange(-1, 3)
    module.count_rows(fdp.ConsumeBytes(fdp.remaining_bytes()), layout, images)


def _learn(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    """A code table of any nodes, texts and range, or gbk's or gb18030's with a byte changed
    (refused unless it is the one learnt: a number is learnt once), under any number."""
    number = fdp.ConsumeIntInRange(-1, 7)
    if fdp.ConsumeBool():
        nodes = bytes(fdp.ConsumeBytes(4 * 256 * fdp.ConsumeIntInRange(0, 3)))
        texts = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
        module.learn_code_table(number, nodes, texts, fdp.ConsumeBytes(4 * fdp.ConsumeIntInRange(0, 16)))
        return
    parts = [bytearray(part) for part in _table(str(fdp.PickValueInList(["gbk", "gb18030.mysql"])))]
    part = parts[fdp.ConsumeIntInRange(0, 2)]
    if part:
        part[fdp.ConsumeIntInRange(0, len(part) - 1)] = fdp.ConsumeIntInRange(0, 255)
    module.learn_code_table(number, *map(bytes, parts))


@functools.cache
def _table(name: str) -> tuple[bytes, bytes, bytes]:
    from connector.binlog.rowplan import code_table  # noqa: PLC0415 - after the swap

    table = code_table(name)
    assert table is not None
    return table


def _route(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    # At most a few thousand partitions: `route` allocates two words per partition, and a topic
    # has what Kafka gives it (the module takes up to 2^31 - 1, which is 32 GiB here).
    partitions = int(fdp.PickValueInList([-1, 0, 1, 2, 3, 16, 4096]))
    fixed = int(fdp.PickValueInList([-2, -1, 0, 1, 2, 15, 4095, 4096]))
    skip = int(fdp.PickValueInList([-1, 0, 1, 5, 2**62]))
    messages: list[object] = []
    for _ in range(fdp.ConsumeIntInRange(0, 6)):
        key = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 9)) if fdp.ConsumeBool() else None
        shape = fdp.ConsumeIntInRange(0, 9)  # now and then not a (key, value) pair of bytes
        messages.append((key, b"v") if shape else (key, 1) if fdp.ConsumeBool() else (key,))
    try:
        module.route(messages, partitions, fixed, skip)
    except TypeError as exc:  # what it says of a message that is not a (key, value) pair of bytes
        assert "is not a (key, value) pair of bytes" in str(exc), exc


# Columns the kernel's plans are made of, whole (op, width, a, b, null branch, value branch): an
# INT, a BIGINT UNSIGNED, a DOUBLE, a DECIMAL(10,2), a DATE, a DATETIME(6), a VARCHAR, a BINARY(4),
# a TIME(6), a BIT(8), an ENUM and a SET of the strings' first labels, text in a charset table,
# binary JSON with a 1-byte and a 4-byte length prefix, a DECIMAL(65,30), gbk text (its code table),
# MySQL's ujis text (codes of up to three bytes), UTF-16 and UTF-32 text (OP_WIDE's forms 0 and 2),
# gb18030 text (four-byte codes: its range), a GEOMETRY (4-byte prefix), a VECTOR (4-byte prefix, and 1).
GBK = 4  # native_spec.CODE_TABLES.index("gbk"), learnt when the boundary target starts
UJIS = 9  # native_spec.CODE_TABLES.index("ujis.mysql"), learnt then too
GB18030 = 10  # native_spec.CODE_TABLES.index("gb18030.mysql"), and this one
GOOD_COLUMNS = [(1, 4, 0, 0, 0, 1), (3, 8, 0, 0, -1, -1), (5, 8, 0, 0, 0, 1), (6, 5, 10, 2, 0, 1), (7, 3, 0, 0, 0, 1),
                (8, 8, 6, 0, 0, 1), (11, 0, 2, 0, 0, 1), (12, 0, 1, 4, -1, -1), (13, 6, 6, 0, 0, 1),
                (14, 1, 0, 0, 0, 1), (16, 1, 0, 2, 0, 1), (17, 1, 0, 3, 0, 1), (18, 0, 1, 4, 0, 1),
                (19, 0, 1, 0, 0, 1), (19, 0, 4, 0, -1, -1), (6, 30, 65, 30, 0, 1), (20, 0, 1, GBK, 0, 1),
                (20, 0, 2, GBK, -1, -1), (20, 0, 1, UJIS, 0, 1), (21, 0, 1, 0, 0, 1),
                (21, 0, 2, 2, -1, -1), (20, 0, 2, GB18030, 0, 1), (22, 0, 4, 0, 0, 1), (23, 0, 4, 0, -1, -1),
                (23, 0, 1, 0, 0, 1)]  # fmt: skip
# Walks the parser makes (width, prefix, check, table): an INT, a VARCHAR of UTF-8, gbk text, JSON, ujis,
# UCS-2 and UTF-16LE text, gb18030 text, a VECTOR's floats.
GOOD_WALKS = [(4, 0, 0, 0), (0, 2, 1, 0), (0, 1, 3, GBK), (0, 2, 3, GBK), (0, 4, 2, 0), (0, 1, 3, UJIS), (0, 1, 4, 3),
              (0, 2, 4, 1), (0, 1, 3, GB18030), (0, 4, 5, 0)]  # fmt: skip
# The event types the kernel handles, and two it leaves to Python.
KERNEL_EVENTS = [2, 16, 19, 23, 24, 25, 29, 30, 31, 32, 33, 34, 160, 162, 4, 27]


def _kernel(module: ModuleType, fdp: atheris.FuzzedDataProvider) -> None:
    """A kernel configured and taught anything, then run over packets of any events: it returns
    (or refuses what it was taught with ValueError, or a plan missing an attribute or with one of another
    type with AttributeError or TypeError); the events are framed as a dump frames them
    (lengths, sequence numbers, CRC-32), so that their bodies, not the framing, meet the handlers."""
    kernel = module.Kernel()
    kernel.records(fdp.ConsumeBool())  # transaction records: each transaction's part of the run too
    checksum = fdp.ConsumeBool()
    lengths = [int(fdp.PickValueInList(choices)) for choices in ([0, 6, 8, 9], [0, 6, 8], [0, 10, 12], [12, 13, 255])]
    query_max = int(fdp.PickValueInList([0, 1, 60, 4096]))  # no statement text; text cut to 1, 60, 4096 bytes
    kernel.configure(checksum, fdp.ConsumeBool(), *lengths, query_max, b" /* cut: ", b" bytes */")
    kernel.file(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 6)), fdp.ConsumeIntInRange(0, 2**32 - 1))
    bodies = []
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        body = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
        bodies.append(body)
        kind = fdp.ConsumeIntInRange(0, 2)
        plan = None if kind == 0 else False if kind == 1 else _plan(fdp)
        topic, metric = fdp.ConsumeIntInRange(-1, 4096), fdp.ConsumeIntInRange(-1, 3)
        with contextlib.suppress(AttributeError, TypeError):  # a plan missing an attribute, or of another type
            kernel.table(int.from_bytes(body[:6].ljust(6, b"\0"), "little"), body, plan, topic, metric)
    if fdp.ConsumeBool():
        shape = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
        kernel.begin(shape, fdp.ConsumeBytes(max(0, len(shape) + fdp.ConsumeIntInRange(-1, 1))))
    packets, sequence, pos = [], 0, 4
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        code = int(fdp.PickValueInList(KERNEL_EVENTS))
        taught = bodies and code == 19 and fdp.ConsumeBool()  # a TABLE_MAP it knows
        body = bodies[0] if taught else fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300))
        length = 19 + len(body) + 4 * checksum
        event = struct.pack("<IBIIIH", 1_700_000_000, code, 1, length, pos + length, 0) + body
        event += struct.pack("<I", zlib.crc32(event)) if checksum else b""
        sequence = (sequence + 1) & 0xFF
        packets.append(struct.pack("<I", len(event) + 1)[:3] + bytes([sequence]) + b"\x00" + event)
        pos += length
    buffer = bytearray(b"".join(packets) + fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8)))
    kernel.run(buffer, 0, len(buffer), 0, 1_700_000_000_000, 0, int(fdp.PickValueInList([1, 2, 4096])))
    kernel.release()
    kernel.clear()


def _plan(fdp: atheris.FuzzedDataProvider) -> SimpleNamespace:
    """A plan: columns whole or of any ints, keys, the envelope's parts, partitions .. limit, and
    canal-json's parts (or None: Avro's rows); attributes named as native_spec.BOUNDARY's, now and
    then one missing or of another type."""
    program = _program(fdp)
    fields = range(fdp.ConsumeIntInRange(0, 2))
    keys = b"".join(struct.pack("<3i", fdp.ConsumeIntInRange(-1, 4), -1, -1) for _ in fields)
    parts = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 6)) for _ in range(8)]
    canal = None
    if fdp.ConsumeBool():  # names and sqlTypes a column each (or one too few or many), any parts
        count = max(0, len(program) // 28 + fdp.ConsumeIntInRange(-1, 1))
        types = b"".join(struct.pack("<3i", *(_int(fdp) for _ in range(3))) for _ in range(count))
        texts = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 6)) for _ in range(7)]
        canal = _damaged(fdp, SimpleNamespace(names=_names(count, fdp), types=types, full_old=fdp.ConsumeBool(),
                                              per_event=fdp.ConsumeBool(), database=texts[0], mysql=texts[1],
                                              pk=texts[2], table=texts[3], kinds=tuple(texts[4:])))  # fmt: skip
    plan = SimpleNamespace(
        columns=program, keys=keys, strings=_strings(fdp), value_prefix=parts[0], key_prefix=parts[1],
        heads=tuple(parts[2:5]), data_open=parts[5], old_null=parts[6], old_open=parts[7],
        partitions=int(fdp.PickValueInList([-1, 0, 1, 3, 4096])), fixed=int(fdp.PickValueInList([-1, 0, 2, 3])),
        key_skip=fdp.ConsumeIntInRange(-1, 12), kinds=fdp.ConsumeIntInRange(-1, 8),
        limit=int(fdp.PickValueInList([-1, 0, 50, 1 << 20])), canal=canal,
    )  # fmt: skip
    return _damaged(fdp, plan)


def _damaged(fdp: atheris.FuzzedDataProvider, parts: SimpleNamespace) -> SimpleNamespace:
    """Now and then one attribute gone, or a str, an int or a short tuple in its place."""
    damage = fdp.ConsumeIntInRange(0, 15)
    if damage < 4:
        name = fdp.PickValueInList(sorted(vars(parts)))
        if damage == 0:
            delattr(parts, name)
        else:
            setattr(parts, name, ("text", 7, (b"",))[damage - 1])
    return parts


if __name__ == "__main__":
    main(sys.argv)
