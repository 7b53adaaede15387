# Two entry points for a new user on a fresh machine (Python 3.10+, Java 17):
#   make check   set up a venv with the core package (compiled when a C compiler
#                is present, pure Python otherwise) and run TLC on the default model
#   make test    set up the full dev venv (torch CPU, NIXL, moto, dev tools) and run every test
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: check test test-long lint bench rgw compiled pure test-compiled test-vllm

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.core-installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e .
	touch $@

# torch first: nixl-cu12 requires torch, and without a CPU torch already
# present pip would fetch a multi-GB CUDA build.  The development install is
# pure Python (an edit to a .py must be what the tests run); test-compiled
# builds the compiled core in place and removes it afterwards.
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(MAKE) -s pure
	$(PIP) install -q torch==2.13.0
	KVPROBE_COMPILE=0 $(PIP) install -q -e '.[nixl,s3,dev]'
	touch $@ $(VENV)/.core-installed

check: $(VENV)/.core-installed
	$(BIN)/kvprobe --version
	$(BIN)/kvprobe check

lint: $(VENV)/.dev-installed
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
test: lint rgw
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -m "not long"

test-long: rgw $(VENV)/.dev-installed
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -m long

bench: $(VENV)/.dev-installed
	$(BIN)/python -m bench.run_all

# The compiled core (mypyc over the same typed source) in the development
# checkout: built in place, its .so files shadow the hot-path modules of
# statemachine/ until `make pure` removes them (an edit made meanwhile is
# reported as stale by `kvprobe --version`, and the suite refuses to run).
# test-compiled runs the suite (as `make test` does) against it.
compiled: $(VENV)/.dev-installed
	KVPROBE_COMPILE=1 $(BIN)/python setup.py -q build_ext --inplace
	$(BIN)/python -c "from kvprobe.build_info import build_info as b; i = b(); assert i.kind == 'compiled' and not i.stale, i; print(i.describe())"

pure:
	rm -rf statemachine/*.so *__mypyc*.so build

test-compiled: rgw compiled
	HYPOTHESIS_PROFILE=ci $(BIN)/python -m pytest -m "not long"; s=$$?; $(MAKE) -s pure; exit $$s

# vLLM 0.33.0's own tier tests (on vLLM's class and with the one-line switch)
# and this repository's tests that need the release, in a separate venv
# (.venv-vllm, about 6 minutes to build the first time): docs/vllm.md.
test-vllm:
	bash tests/vllm_release/run.sh
