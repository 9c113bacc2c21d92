"""What the test modules share: no test module imports another (../shared/STYLE.md). Older
helper modules beside it (tests/live.py, tests/pipelines.py, tests/specs.py, ...) are shared the
same way."""
