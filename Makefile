# The two README commands. Each creates .venv and installs what it needs on first use.
PY ?= python3
VENV := .venv
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test

serve: $(VENV)/.installed-serve
	$(VENV)/bin/realtime-tts serve --host $(HOST) --port $(PORT) $(ARGS)

test: $(VENV)/.installed-test
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip

# The client package (clients/python: `realtime-tts say`, the LLM bridge, bench/load.py) installs beside it.
$(VENV)/.installed-serve: pyproject.toml clients/python/pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e . -e clients/python
	touch $@

# The reference `omnivoice` package is the parity oracle only: installed without its training/UI
# dependencies (gradio, webdataset, ...), which the model code we compare against never imports.
$(VENV)/.installed-test: pyproject.toml clients/python/pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e '.[test]' -e clients/python
	$(VENV)/bin/python -m pip install -q --no-deps omnivoice==0.2.1
	touch $@ $(VENV)/.installed-serve
