# Two entry points for a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
# pip byte-compiles what it installs on one core (minutes for torch, Ray and transformers);
# compileall does it on every core. Compiled they must be: where PYTHONDONTWRITEBYTECODE is set,
# nothing compiled on import is kept, and every process would compile its imports again. A few
# of torch's files are written for newer Pythons and do not compile; pip skips them too.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check --no-compile
COMPILE := $(PY) -m compileall -qq -j 0 $(VENV)/lib || true

.PHONY: install browser demo test test-fast lint bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements-assets.txt
	python3 -m venv $(VENV)
	$(PIP) -e '.[dev]'
	$(PIP) --no-deps -r requirements-assets.txt
	$(COMPILE)
	touch $@

# Ray Serve, for the tests of serving on several replicas (optional for users: ragserve[ray]).
$(VENV)/.ray: $(VENV)/.installed
	$(PIP) -e '.[ray]'
	$(COMPILE)
	touch $@

# Indexes 1,000 Wikipedia articles and two board-only memos (once), prints four keys (readers,
# a writer, an administrator), and serves the API and the web page on http://127.0.0.1:8000.
demo: install
	$(VENV)/bin/ragserve demo --data-dir data

# The web page's tests drive Debian's Chromium through Playwright (its driver cannot download a
# browser without the internet); installed with apt-get when missing, as root or through sudo.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: install $(VENV)/.ray browser
	$(VENV)/bin/ruff check ragserve tests
	$(VENV)/bin/ruff format --check ragserve tests
	$(VENV)/bin/pytest -q -n auto --maxprocesses 4 --dist loadscope -m "not serial" --durations=30
	$(VENV)/bin/pytest -q -m serial --durations=10

# What a developer runs on every edit: the tests that need no real model, no server over it, no
# PostgreSQL, Chromium or Ray (tests/conftest.py marks the others slow); the engine's mechanics
# run on a tiny random-weight model.
test-fast: install
	$(VENV)/bin/pytest -q -m "not slow" --durations=10

bench: install
	$(VENV)/bin/ragserve bench offline
