# Two entry points for a new user on a fresh machine (Python 3.10+, Java 17):
#   make check   set up a venv with the core package (compiled when a C compiler
#                is present, pure Python otherwise) and run TLC on the default model
#   make test    set up the full dev venv (torch CPU, NIXL, moto, dev tools) and run every test
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
# The suite starts hundreds of interpreters: with PYTHONDONTWRITEBYTECODE
# set, each compiles every module of the checkout it imports and each pytest
# rewrites every test module.  The recipes write bytecode (__pycache__/, which
# git ignores).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: check dev test test-long test-long-stages test-long-quiet lint bench rgw compiled pure test-compiled test-vllm

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The package folders: an editable install is a tree of links to their files
# (build/__editable__*), laid again when a module is added or removed.
PACKAGE_DIRS := spec statemachine backends tla src/kvprobe $(wildcard src/kvprobe/*/ src/kvprobe/*/*/)

# make check installs the package itself (a wheel: compiled where a C
# compiler is present), not an editable link to the checkout: nothing
# compiled is ever written into the source tree.
$(VENV)/.core-installed: pyproject.toml setup.py | $(BIN)/python
	$(PIP) install -q .
	touch $@

# torch first: nixl-cu12 requires torch, and without a CPU torch already
# present pip would fetch a multi-GB CUDA build.  The development install is
# editable and pure Python (an edit to a .py is what the tests run).
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(MAKE) -s pure
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[nixl,s3,dev]'
	touch $@ $(VENV)/.core-installed $(VENV)/.links

$(VENV)/.links: $(PACKAGE_DIRS) | $(VENV)/.dev-installed
	$(PIP) install -q --no-deps -e .
	touch $@

dev: $(VENV)/.dev-installed $(VENV)/.links

check: $(VENV)/.core-installed
	$(BIN)/kvprobe --version
	$(BIN)/kvprobe check

lint: dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m buildtools.typecheck

# The object-store tests need Ceph RGW; as root with apt it is installed,
# otherwise those tests skip with a line saying how to install it.
rgw:
	@command -v radosgw >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ceph-mon ceph-osd radosgw ceph-common; } || \
	  echo "RGW tests will skip: apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw ceph-common"

# Every test but the long ones (deep model runs, long campaigns: marked
# `long`), which have their own target so that `make test` stays short.
# Four pytest processes side by side (buildtools/stages.py prints each one's
# log and the sum): the TLC runs (marked `tlc`, Java keeping a core busy) in
# two, the first holding the tests that share mutant runs through
# tests/tla/mutant_runs.py and TLC's state graphs through tests/tla/conftest.py's
# session fixtures (one process, one run each: the chain's and the cache's
# mutant tests make the runs tests/cli's explain tests make); the rest (mostly
# waiting on threads, sockets and local servers) in two by folder.
# Then, alone, the tests marked `quiet`: they judge helpers by the CPU they
# get (tests/faults/test_cpu_gate.py), which a TLC run beside them starves;
# buildtools.wait_quiet first waits (at most a minute) for what the stages
# left running to end, and names it.
STAGES := $(BIN)/python -m buildtools.stages

test: lint rgw
	HYPOTHESIS_PROFILE=ci $(STAGES) \
	  "not long and tlc@tests/tla/test_tla_check.py,tests/cli,tests/tla/test_model_replay.py,tests/tla/test_tla_conformance.py,tests/tla/test_model_walk_checks.py,\
	tests/tla/test_tla_chain.py::test_each_chain_mutant_is_caught_by_its_clause,tests/tla/test_tla_cache.py::test_each_cache_mutant_is_caught_by_its_clause" \
	  "not long and tlc@!tests/tla/test_tla_check.py,!tests/cli,!tests/tla/test_model_replay.py,!tests/tla/test_tla_conformance.py,!tests/tla/test_model_walk_checks.py,\
	!tests/tla/test_tla_chain.py::test_each_chain_mutant_is_caught_by_its_clause,!tests/tla/test_tla_cache.py::test_each_cache_mutant_is_caught_by_its_clause" \
	  "not long and not tlc and not quiet@tests/core,tests/cli,tests/conform,tests/mutants,tests/property,tests/engine,tests/bench/test_outputs.py" \
	  "not long and not tlc and not quiet@!tests/core,!tests/cli,!tests/conform,!tests/mutants,!tests/property,!tests/engine,!tests/bench/test_outputs.py"
	$(BIN)/python -m buildtools.wait_quiet
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider -q -m "not long and not tlc and quiet"

# Three stages: liveness2 (about 10 CPU minutes of TLC on one worker) in a
# stage of its own and ahead of the others (they run at niceness 5, so the
# long pole keeps a core), the other long TLC runs, and the rest
# (Hypothesis campaigns, RGW storms and fleets).  Then, alone, the long
# tests marked `quiet`: two campaigns of random 503s through a Python proxy,
# one after the other (a TLC run beside one starves it; run side by side,
# the 20 % campaign once shed 738 keys), and the pace's way back from its
# floor on RGW (what it sends is what the CPU lets it send).  .ci/run runs the two parts apart:
# vLLM's tests, the deep replay and test-compiled run beside the stages and
# end before the quiet tests.
test-long: test-long-stages test-long-quiet

test-long-stages: rgw dev
	HYPOTHESIS_PROFILE=ci $(STAGES) --first-ahead 5 \
	  "long and tlc@tests/tla/test_tla_check.py::test_the_wider_configs_hold[liveness2]" \
	  "long and tlc@!tests/tla/test_tla_check.py::test_the_wider_configs_hold[liveness2]" \
	  "long and not tlc and not quiet"

test-long-quiet: rgw dev
	$(BIN)/python -m buildtools.wait_quiet
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -p no:cacheprovider -q -m "long and not tlc and quiet"

bench: dev
	$(BIN)/python -m bench.run_all

# The compiled core (mypyc over the same typed source) gets a venv of its
# own, .venv-compiled: a wheel built from the checkout (a snapshot of the .py
# and the .so built from it, so no edit can make it stale) installed there,
# with the development venv's third-party packages behind it (one .pth
# line).  The development venv stays editable and pure, so test-compiled can
# run while other jobs import the package from it.
CVENV := .venv-compiled
CBIN := $(CVENV)/bin

compiled: dev
	rm -rf $(CVENV)
	$(BIN)/python -m venv --without-pip $(CVENV)
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	  "$$($(CBIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/zz_development_venv.pth"
	KVPROBE_COMPILE=1 $(PIP) --python $(CBIN)/python install -q --no-deps --no-build-isolation .
	$(CBIN)/python -c "from kvprobe.build_info import build_info as b; i = b(); assert i.kind == 'compiled' and not i.stale, i; print(i.describe())"

# Removes compiled modules an older checkout built in place, and the compiled
# venv; puts the editable install back if an older checkout's test-compiled
# replaced it.
pure:
	rm -rf statemachine/*.so *__mypyc*.so build/lib* build/temp* build/mypyc-src $(CVENV)
	[ ! -x $(BIN)/python ] || [ ! -f $(VENV)/.dev-installed ] || $(PIP) install -q --no-deps -e .

# The compiled core is what the scheduler-facing tests exercise: the core,
# the property suite and its mutants, the drop-in, the packaging checks
# (every other test runs against the same code in `make test`), in two
# stages side by side (none of them is marked `quiet`).
COMPILED_STAGES := "not long@tests/core,tests/property,tests/mutants" "not long@tests/engine,tests/packaging"

test-compiled: rgw compiled
	HYPOTHESIS_PROFILE=ci $(CBIN)/python -m buildtools.stages $(COMPILED_STAGES)

# vLLM 0.33.0's own tier tests (on vLLM's class and with the one-line switch)
# and this repository's tests that need the release, in a separate venv
# (.venv-vllm, about 6 minutes to build the first time): docs/vllm.md.
test-vllm:
	bash tests/vllm_release/run.sh
