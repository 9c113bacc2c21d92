"""The compiled canal-JSON renderer (connector/csrc/canaltext.c) against the Python path it accelerates.

On the corpus's rows events it renders (tests/test_corpus.py holds its whole lines to the messages
one by one), and on those events' images mutated: each row's `data` JSON (an UPDATE's with its
`old`) is exactly what the Python decoders and renderers make of the same bytes, or it declines;
never different text, and never text where the Python decoders refuse the bytes."""

from __future__ import annotations

import random
from typing import Any

from connector.binlog.constants import RowsKind
from connector.binlog.file import iter_file_events
from connector.binlog.parser import DECODE_FAULTS, BinlogParser
from connector.binlog.rows import RowsDecoderCache
from connector.errors import BinlogDecodeError
from connector.flat import FlatMessageBuilder, JsonLineEncoder, RowBatch, _changed, _texts_json
from connector.native import transcoder
from connector.offset import Offset
from connector.querytext import WHOLE_QUERIES
from tests.support.corpus import corpus_files, mutate


def _python(batch: RowBatch, body: bytes) -> list[Any] | None:
    """What the Python path renders of `body` as this event's images; None where its decoders refuse it."""
    rows = batch.rows
    assert rows.table is not None
    decoder = RowsDecoderCache().get(rows.table, rows.kind, rows.present, rows.present_after, False)
    try:
        images = decoder(body, 0, len(body))
    except DECODE_FAULTS:
        return None
    shape, whole = batch.shape, batch.shape.whole_json
    if rows.kind == RowsKind.UPDATE:
        pairs = [(before or (), after or ()) for before, after in images]  # an UPDATE has both images
        return [(whole(after), _texts_json(_changed(shape, before, after))) for before, after in pairs]
    return [whole((after if rows.kind == RowsKind.WRITE else before) or ()) for before, after in images]


def _compiled_batches() -> list[tuple[RowBatch, Any]]:
    """Rows events of the corpus the compiled renderer takes (a few per file), with its program."""
    out = []
    for entry in corpus_files():
        encoder = JsonLineEncoder()
        builder = FlatMessageBuilder(Offset.of(entry.path.name), clock=lambda: 1.5, query=WHOLE_QUERIES)
        parser = BinlogParser(entry.path.name)
        parser.raw_rows = True
        taken = 0
        try:
            for event in iter_file_events(str(entry.path), parser=parser):
                for item in builder.feed_batched(event):
                    if isinstance(item, RowBatch) and taken < 12 and encoder._compiled(item) is not None:
                        out.append((item, encoder._programs[id(item.shape)]))
                        taken += 1
        except BinlogDecodeError:
            assert entry.may_fail, entry.name
    return out


def test_mutated_images_render_as_python_or_not_at_all() -> None:
    assert transcoder is not None
    rng = random.Random(17)
    outcomes = {"same": 0, "declined": 0, "python refuses": 0}
    batches = _compiled_batches()
    assert len(batches) >= 30, len(batches)
    kinds = {RowsKind.WRITE: 0, RowsKind.UPDATE: 1, RowsKind.DELETE: 2}
    for batch, (_, program, names) in batches:
        rows = batch.rows
        assert transcoder.render_json(rows.raw, program.columns, kinds[rows.kind], program.strings, names) == _python(
            batch, rows.raw
        )  # fmt: skip
        for _ in range(40):
            body = mutate(rng, rows.raw)
            rendered = transcoder.render_json(body, program.columns, kinds[rows.kind], program.strings, names)
            python = _python(batch, body)
            if python is None:
                outcomes["python refuses"] += 1
            if rendered is None:
                outcomes["declined"] += 1
                continue
            assert rendered == python, (batch.source, body.hex())
            outcomes["same"] += 1
    assert all(outcomes.values()), outcomes
