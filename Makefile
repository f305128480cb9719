# Two entry points: `make demo` and `make test`. Both work on a fresh Debian machine as root.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STATE := .sandbox
# `make demo` and `make test` stop the sandbox they started when they end (also after a failure or
# Ctrl-C); KEEP_SANDBOX=1 leaves it running and says how to stop it (`make sandbox-down`).
KEEP_SANDBOX ?=
SESSION = $(PY) -m sandbox.session run --name $@ $(if $(filter-out 0,$(KEEP_SANDBOX)),--keep) --
# sandbox-down also works once the venv is gone (`make clean`): the session module needs Python only.
SANDBOX_PY = $(if $(wildcard $(PY)),$(PY),$(PYTHON))

.PHONY: demo test test-fast test-compat test-steps soak soak-steps packages venv lint bench docs sandbox-slurm sandbox-airflow sandbox-ui sandbox-down clean

# Every Debian package the sandbox needs, in one apt-get run before anything runs in parallel
# (sandbox/packages.sh lists them). `make demo` needs the venv and the host's Slurm only.
packages:
	bash sandbox/packages.sh

$(VENV)/.installed: pyproject.toml
	bash sandbox/packages.sh python
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,openlineage]'
	touch $@

venv: $(VENV)/.installed

sandbox-slurm:
	SANDBOX_SLURM_TAKEOVER=1 bash sandbox/slurm/up.sh
	SANDBOX_SLURM_TAKEOVER=1 bash sandbox/slurm/versions.sh up all

# PostgreSQL from Debian's packages for the real Airflow deployment (tests/deployment).
sandbox-airflow:
	bash sandbox/airflow/install.sh

# Headless Chromium from Debian's packages for the browser tests of the Airflow UI (tests/ui).
sandbox-ui:
	bash sandbox/ui/install.sh

# The documentation site (docs/): warnings are errors.
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

demo:
	bash sandbox/packages.sh python slurm
	$(MAKE) --no-print-directory venv
	$(SESSION) $(PY) -m sandbox.demo

test: packages venv
	$(SESSION) $(MAKE) --no-print-directory test-steps

# What `make test` runs inside its sandbox session. PATHWAYS_SANDBOX_REQUIRED=1: a test whose
# environment is missing (root, Debian, Chromium, a package) fails instead of skipping. The whole
# suite mostly waits (on Slurm, Airflow and the stand-ins), so the compatibility tier runs beside it
# at a lower CPU priority (sandbox/beside.sh); its output follows the suite's.
test-steps: sandbox-slurm sandbox-airflow sandbox-ui docs
	$(VENV)/bin/ruff check .
	PATHWAYS_SANDBOX_REQUIRED=1 bash sandbox/beside.sh "the compatibility tier (make test-compat)" \
		"$(MAKE) --no-print-directory test-compat" $(PY) -m pytest -q -p no:cacheprovider tests

# The older Airflow versions the provider supports (the full suite runs on the venv's, 3.3): each in
# its own venv (.venv-compat/<version>, pinned by sandbox/compat/constraints-<version>.txt, reused
# while unchanged; 2.11 on Python 3.10 and 3.2 on 3.12 where the machine has them), running the
# fast tier and the smoke of a real deployment (tests/deployment/compat; docs/compatibility.rst).
COMPAT_AIRFLOW ?= 2.11.2 3.0.6 3.1.8 3.2.2
FAST_TIER = not service and not slow and not end_to_end
# The compatibility tier adds the DAG runs whose behaviour differs between Airflow versions (marked
# versioned: metrics, TPU-hours across tries, dry runs' logs) though they are end_to_end.
COMPAT_TIER = ($(FAST_TIER)) or (versioned and not service)
test-compat:
	bash sandbox/packages.sh python airflow
	bash sandbox/compat/venv.sh $(COMPAT_AIRFLOW)
	FAST_TIER="$(COMPAT_TIER)" bash sandbox/compat/test.sh $(COMPAT_AIRFLOW)

# The fast tier (under 90 s on 2 cores): the Airflow-free domain, the provider's faces against the
# Kubernetes stand-in (the core DAG runs; the rarer scenarios are marked end_to_end), no Slurm, GCS
# emulator, Airflow deployment or browser, nothing installed as root. `make test` runs these too.
# Three pytest-xdist workers, each with its own stand-in and Airflow home: the tier mostly waits on
# programs that run for seconds, so on 2 cores three workers take 60 s where two take 75-90 s and
# one 150 s. (The compatibility tier keeps two: it runs beside the whole suite.)
test-fast: venv
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider -n 3 -m "$(FAST_TIER)" tests

# The randomized fault soak (tests/soak, docs/development.rst): random DAG shapes under random
# faults on one real deployment, each run's invariants checked against the stand-ins' records; not
# part of `make test`. SOAK_SEED=<a run's seed> SOAK_RUNS=1 replays one run with its schedule.
SOAK_RUNS ?= 300
SOAK_MINUTES ?= 50
SOAK_SEED ?=
SOAK_CONCURRENCY ?= 8
SOAK_PLATFORMS ?= gke
soak: packages venv
	$(SESSION) $(MAKE) --no-print-directory soak-steps

soak-steps: $(if $(findstring slurm,$(SOAK_PLATFORMS)),sandbox-slurm) sandbox-airflow
	SOAK_RUNS=$(SOAK_RUNS) SOAK_MINUTES=$(SOAK_MINUTES) SOAK_SEED=$(SOAK_SEED) \
		SOAK_CONCURRENCY=$(SOAK_CONCURRENCY) SOAK_PLATFORMS=$(SOAK_PLATFORMS) $(PY) -m tests.soak

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: venv
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

# Everything any target can have started: the Slurm clusters (host and chroots, whichever checkout
# started them), this checkout's Kubernetes stand-in, GCS emulators, Airflow and PostgreSQL
# processes, and what deleted checkouts or killed runs left (sandbox/session.py).
sandbox-down:
	$(SANDBOX_PY) -m sandbox.session down $(if $(filter 1,$(FORCE)),--force)

clean: sandbox-down
	rm -rf $(VENV) .venv-compat $(STATE)
