"""The initial snapshot: rows that existed before the binlog, published as READ messages.

`state` is its progress, saved inside the checkpoint position; `reader` reads primary-key
chunks inside one consistent read each; `coordinator` hands each chunk over at the binlog
position its read is valid at, so no change is lost or overtaken.
"""
