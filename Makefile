# minibroker: two commands on a fresh machine.
#   make run    start the broker on 127.0.0.1:61613 (data in ./data)
#   make test   run the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test venv bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Re-install whenever the project's metadata changes.
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/minibroker serve --host 127.0.0.1 --port 61613 --data-dir ./data

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/compare.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) data build *.egg-info
