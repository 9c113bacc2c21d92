# Two commands matter: `make run` (bring services up, show change data flowing) and
# `make test` (lint, type-check and every test against the real services).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The compiled module's sources; connector/csrc/spec.h is written by connector/native_spec.py.
NATIVE := connector/_transcode.c $(wildcard connector/csrc/*.c connector/csrc/*.h)
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(NATIVE) | md5sum | cut -c1-8)

.PHONY: install services services-down run test lint typecheck unit bench clean

install: $(STAMP)

$(STAMP): pyproject.toml $(NATIVE) connector/native_spec.py
	PYTHON=$(PYTHON) bash deploy/toolchain.sh
	$(PYTHON) -m connector.native_spec
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

services:
	bash deploy/services.sh up

services-down:
	bash deploy/services.sh down

run: install services
	bash deploy/demo.sh

lint: install
	$(BIN)/ruff check connector tests bench spark

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -m "not live" -q

test: install services lint typecheck
	$(BIN)/pytest -q --durations=30

bench: install services
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/topics.py
	$(BIN)/python bench/decode.py
	$(BIN)/python bench/live.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/spark.py
	$(BIN)/python bench/spark_stream.py
	$(BIN)/python bench/catchup.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
