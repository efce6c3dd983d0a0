# The two README commands. Each creates .venv and installs what it needs on first use.
PY ?= python3
VENV := .venv
# The stock pipecat / LiveKit TTS plugins (tests/test_plugins.py) pin versions of soxr, soundfile and protobuf
# the server's venv does not run: they get a venv of their own, driven as subprocesses.
PLUGIN_VENV := .venv-plugins
HOST ?= 127.0.0.1
PORT ?= 8000
# The two venvs of `make test` install side by side (downloads and unpacking overlap; each pip has its own venv).
MAKEFLAGS += -j2

.PHONY: serve test

serve: $(VENV)/.installed-serve
	$(VENV)/bin/realtime-tts serve --host $(HOST) --port $(PORT) $(ARGS)

# Three pytest processes, each file whole in one (pytest-xdist): many tests wait on servers, sockets and
# timeouts, so a third process overlaps those waits on a 2-core machine; PYTEST_ARGS= runs them in this one.
# --durations: CI's log lists the slowest tests, to keep the whole run under 15 minutes.
PYTEST_ARGS ?= -n 3 --dist loadfile --durations=15

test: $(VENV)/.installed-test $(PLUGIN_VENV)/.installed
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

$(PLUGIN_VENV)/.installed: tests/plugins/requirements.txt
	$(PY) -m venv $(PLUGIN_VENV)
	$(PLUGIN_VENV)/bin/python -m pip install -q --upgrade pip
	$(PLUGIN_VENV)/bin/python -m pip install -q -r tests/plugins/requirements.txt
	touch $@
