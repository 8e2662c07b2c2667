# torchx-airflow: `make demo` runs the example pipeline, `make test` runs the whole suite.
# Both set themselves up: a virtual environment in .venv and an Airflow home in .airflow (git-ignored).

PYTHON ?= python3
# Which TorchX the environment gets: `release` (the torchx release on PyPI, what CI runs) or `nightly`
# (TorchX main as published by torchx-nightly, in its own .venv-nightly so the release one stays intact):
#   TORCHX=nightly make test
TORCHX ?= release
TORCHX_NIGHTLY ?= 2026.10.26
# Each is an extra of both distributions (TorchX is no plain dependency of either).
ifeq ($(TORCHX),release)
VENV ?= $(CURDIR)/.venv
STAMP = $(VENV)/.installed
TORCHX_EXTRA = torchx
TORCHX_PIN =
else ifeq ($(TORCHX),nightly)
VENV ?= $(CURDIR)/.venv-nightly
STAMP = $(VENV)/.installed-nightly-$(TORCHX_NIGHTLY)
TORCHX_EXTRA = torchx-nightly
TORCHX_PIN = 'torchx-nightly==$(TORCHX_NIGHTLY)'
else
$(error TORCHX must be 'release' or 'nightly', got '$(TORCHX)': run `make test` or `TORCHX=nightly make test`)
endif
BIN := $(VENV)/bin
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER ?= $(CURDIR)/dags
export AIRFLOW__CORE__LOAD_EXAMPLES ?= False
# local_cwd jobs run `python` from PATH: make it the environment's interpreter.
export PATH := $(BIN):$(PATH)

# The example pipeline trains PyTorch models (the `examples` extra). torch is pinned and installed
# before the extra, which then finds it satisfied, from PyTorch's CPU index where that can be reached
# (scripts/install-torch.sh; else the configured index, whose Linux torch is the CUDA build of several
# GB). `make install TORCH=...` overrides the pin, TORCH_INDEX= skips the CPU index.
TORCH ?= torch==2.13.0

# The MLflow tracking server (the tests', the benchmarks' and `make up`'s) runs from an environment of
# its own with the full `mlflow`, whose pandas, pyarrow, scipy and scikit-learn `import mlflow` loads
# wherever they are installed (about 80 MB in each process). The test environment, like users' workers
# and jobs (the tracker's `mlflow` extra), has the client alone: mlflow-skinny, at the same version.
# Each TorchX flavour has its own (.venv-mlflow, .venv-nightly-mlflow), built after its environment.
MLFLOW_VENV ?= $(VENV)-mlflow
MLFLOW_STAMP = $(MLFLOW_VENV)/.installed
export MLFLOW_SERVER_PYTHON ?= $(MLFLOW_VENV)/bin/python

# `make up` ports: make up AIRFLOW_PORT=8081 MLFLOW_PORT=5001
# Scaled out: make up EXECUTOR=celery (redis-server on REDIS_PORT and CELERY_WORKERS Celery workers)
# The stack's settings (AIRFLOW_PORT, AIRFLOW_LOG_PORT, EXECUTOR, REDIS_PORT, CELERY_WORKERS): only what
# the command line or the environment sets goes to scripts/airflow-stack.sh, whose defaults (and, after
# `make up`, the home's recorded settings) apply otherwise. `make up` also starts MLflow on MLFLOW_PORT.
MLFLOW_PORT ?= 5000
GIVEN_ENV = $(foreach v,AIRFLOW_PORT MLFLOW_PORT AIRFLOW_LOG_PORT EXECUTOR REDIS_PORT CELERY_WORKERS,\
	$(if $(filter command% environment%,$(origin $(v))),$(v)=$($(v))))

.PHONY: install demo test test-busy test-compose lint docs docs-build clean up down start stop status slurm-up slurm-down k8s-up k8s-down bench

install: $(STAMP) $(MLFLOW_STAMP)

$(STAMP): pyproject.toml tracker/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is needed, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	bash scripts/install-torch.sh $(BIN)/python '$(TORCH)'
ifeq ($(TORCHX),nightly)
	# torchx-nightly ships the same `torchx` package as the release: a release left in this venv by an
	# older install goes first (its uninstall removes files both own, so the nightly is reinstalled)
	if $(BIN)/python -m pip show --quiet torchx 2> /dev/null; then \
	  $(BIN)/python -m pip uninstall --quiet -y torchx torchx-nightly; fi
endif
	$(BIN)/python -m pip install --quiet -e './tracker[mlflow,s3,$(TORCHX_EXTRA)]' \
	  -e '.[test,examples,celery,openlineage,$(TORCHX_EXTRA)]' $(TORCHX_PIN)
	$(BIN)/python -c 'import torchx; print("TorchX", torchx.__version__, "in", "$(VENV)")'
	touch $@

# The MLflow server's environment: the full mlflow at the version of the client in $(VENV).
$(MLFLOW_STAMP): $(STAMP)
	test -x $(MLFLOW_VENV)/bin/python || $(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MLFLOW_VENV)/bin/python -m pip install --quiet \
	  "mlflow==$$($(BIN)/python -c 'from importlib.metadata import version; print(version("mlflow-skinny"))')"
	touch $@

demo: install
	bash scripts/airflow-home.sh
	bash scripts/demo.sh

# The suite runs in PYTEST_WORKERS processes, one test file at a time each (pytest-xdist): most of its
# time is spent waiting on jobs and Airflow's services, not on the CPU. PYTEST_WORKERS=0: one process.
# The Slurm cluster and the Kubernetes test cluster (scripts/k8s/cluster.sh; its first start on a
# machine builds kube-apiserver) the tests share are started before them (as root) and stopped after.
# tests/compose (docker-compose.yml on stand-in images it builds first) runs with `make test-compose`.
# At the end, the peak memory of all the suite's processes together (tests/peak_memory.py; a report,
# never a failure). Every server a test starts dies with the test process that started it.
# Files are handed out longest first (tests/scheduling.py, from tests/durations.json); the run's JUnit
# report goes to the test artifacts directory (tests/artifacts.py), from which that table is refreshed.
PYTEST_WORKERS ?= 3
TEST_ARTIFACTS ?= $(or $(TORCHX_AIRFLOW_TEST_ARTIFACTS),$(or $(TMPDIR),/tmp)/torchx-airflow-test-artifacts)
test: install
	bash scripts/airflow-home.sh
	$(BIN)/python tests/peak_memory.py bash scripts/with-slurm.sh bash scripts/k8s/with-cluster.sh \
	  $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile -m 'not compose' \
	  --junitxml=$(TEST_ARTIFACTS)/junit.xml $(PYTEST_ARGS)

# The same suite on a machine kept busy by another load (2 spinning cores, 4 GiB held): it must pass so.
test-busy: install
	$(BIN)/python tests/busy.py --cores 2 --gib 4 -- $(MAKE) test

# docker-compose.yml run for real (as root): installs Docker's engine from Debian's packages, builds
# the stand-in images (scripts/compose-images.sh; the first build takes tens of minutes), runs
# torchx_pipeline through the stack's REST API, scales the workers to three, brings the stack down.
test-compose: install
	$(BIN)/python -m pytest -p no:cacheprovider -s tests/compose $(PYTEST_ARGS)

# Every bench/bench_*.py, each figure against its baseline in the same run: writes bench/results.json
# and docs/benchmarks.md from it (a unit test checks the page is that rendering; sized for 2 cores).
# BENCH_ARGS=tracker runs only bench/bench_tracker.py (the other modules' results are kept).
# The triggerer and log figures run on the Slurm cluster: started here when none answers (root).
bench: install
	@bash scripts/slurm/cluster.sh status || bash scripts/slurm/cluster.sh up
	$(BIN)/python bench/run.py $(BENCH_ARGS)

up: install
	MLFLOW_PORT=$(MLFLOW_PORT) $(GIVEN_ENV) bash scripts/airflow-stack.sh up

down:
	$(GIVEN_ENV) bash scripts/airflow-stack.sh down

# One service of the stack `make up` started: `make stop SERVICE=worker-2` (KILL=1: SIGKILL),
# `make start SERVICE=worker-2`, `make status`.
start stop:
	$(if $(SERVICE),,$(error SERVICE is not set: e.g. make $@ SERVICE=worker-2 (make status lists them)))
	$(GIVEN_ENV) bash scripts/airflow-stack.sh $@ $(SERVICE) $(if $(filter 1 yes true,$(KILL)),--kill)

status:
	$(GIVEN_ENV) bash scripts/airflow-stack.sh status

slurm-up:
	bash scripts/slurm/cluster.sh up

slurm-down:
	bash scripts/slurm/cluster.sh down

# A Kubernetes API server with Volcano's CRDs and a stand-in for Volcano and the kubelet, on loopback
# (scripts/k8s/cluster.sh; the first start builds kube-apiserver into /var/cache/torchx-airflow/k8s,
# as root). Its last line is `export KUBECONFIG=...`.
k8s-up:
	@bash scripts/k8s/cluster.sh up

k8s-down:
	bash scripts/k8s/cluster.sh down

# The linters are pinned in pyproject.toml's `lint` extra (also what .pre-commit-config.yaml runs);
# mypy reads the installed Airflow and TorchX, so it runs in the full environment.
LINT_STAMP = $(VENV)/.installed-lint
LINT_PATHS = torchx_airflow tracker dags tests bench scripts
$(LINT_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[lint]'
	touch $@

lint: $(LINT_STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/codespell

# The documentation site (docs/, mkdocs.yml). docs-build: warnings are errors (CI runs it); the site
# is built outside the checkout (no --quiet: it would hide the warnings strict mode counts).
# docs: served at http://127.0.0.1:$(DOCS_PORT) while you edit.
DOCS_STAMP = $(VENV)/.installed-docs
DOCS_PORT ?= 8000
export NO_MKDOCS_2_WARNING = 1
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

docs-build: $(DOCS_STAMP)
	site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --site-dir "$$site" && rm -rf "$$site"

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

clean:
	rm -rf $(VENV) $(MLFLOW_VENV) $(AIRFLOW_HOME)
