"""What the test modules share: no test module imports another (../shared/STYLE.md). Older
helper modules beside it (tests/support/live.py, tests/support/pipelines.py, tests/support/specs.py, ...) are shared the
same way."""
