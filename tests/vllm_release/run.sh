#!/usr/bin/env bash
# Test kvprobe's drop-in against a released vLLM: its real tiers and its own tier tests.
#
#   tests/vllm_release/run.sh [deps|link|setup|test|all]      (default: all; run from anywhere)
#
# deps   creates $VLLM_VENV (default .venv-vllm) and installs torch 2.13.0
#        (CPU, before vLLM's requirements, so nothing pulls a CUDA build),
#        `pip install --no-deps vllm==$VLLM_VERSION` (the 336 MB wheel,
#        without vLLM's dependency tree), then requirements.txt beside this
#        script (what vLLM's kv_offload import chain needs, and pytest).
#        Skipped when that venv already has this vLLM version.  Touches
#        nothing in the checkout, so it may run beside `make dev`.
# link   creates $VLLM_VENV with kvprobe editable from this checkout
#        (nothing when it already imports from here).
# setup  deps, then link.
# test   downloads vLLM's sdist with pip and takes its tier tests
#        (tests/v1/kv_offload/tiering/test_{async_lookup,fs_tier,obj_tier}.py)
#        into a temporary directory: nothing of vLLM's is kept in this
#        repository.  First runs this repository's engine processes that
#        exit with lookups in flight (tests/engine/test_exit_in_flight.py),
#        then vLLM's tier tests on vLLM's own AsyncLookupManager (the
#        as-shipped baseline: all must pass) and then with the one-line
#        switch to kvprobe's drop-in (kvprobe_switch.py; the tests listed in
#        private_fields.toml must fail, the others pass), then the fs and obj
#        tests on kvprobe's own ObjTier and FsTier (tiers_expected_failures.toml
#        lists the ones that must fail), and finally this
#        repository's tests that need the release: the differences from vLLM's
#        own class, the tier-poll thread scenario, and kvprobe's tiers in vLLM.
#
# Another vLLM release: VLLM_VERSION=0.34.0 tests/vllm_release/run.sh
# (docs/vllm.md says what to check).  Needs Python 3.11+ and PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=tests/vllm_release
VLLM_VERSION=${VLLM_VERSION:-0.33.0}
VENV=$(realpath -m "${VLLM_VENV:-.venv-vllm}")
PY=${PY:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
TEST_FILES=(test_async_lookup.py test_fs_tier.py test_obj_tier.py)

# kvprobe from this checkout, editable, in $VENV (created if missing);
# nothing to do when it already imports from here.  A step of its own
# because an editable install lays build/__editable__* again, the link
# tree through which every venv installed -e from this checkout imports:
# .ci/run runs it before make test, so that the rest of the setup (the
# downloads) runs beside the suite and no test sees the tree half laid
# (one CI run's `kvprobe check` died of ModuleNotFoundError that way).
# Pure Python: an editable compiled build would leave its .so files in the
# checkout, shadowing the .py files for every other venv using it.
new_venv() {
    [ -x "$VENV/bin/python" ] && return
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
}

link() {
    new_venv
    if "$VENV/bin/python" -c "import sys, pathlib, kvprobe.backends.memory as m
sys.exit(not pathlib.Path(m.__file__).resolve().is_relative_to(pathlib.Path.cwd().resolve()))" 2>/dev/null; then
        return
    fi
    KVPROBE_COMPILE=0 "$VENV/bin/python" -m pip install -q -e .
}

deps() {
    new_venv
    local marker="$VENV/.vllm-release" stamp
    stamp="vllm==$VLLM_VERSION $(cat "$HERE/requirements.txt" | cksum)"
    if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ]; then
        return
    fi
    local start=$SECONDS
    local pip=("$VENV/bin/python" -m pip)
    "${pip[@]}" install -q torch==2.13.0
    "${pip[@]}" install -q --no-deps "vllm==$VLLM_VERSION"
    # vLLM's metadata asks for far more (and for other torch and other
    # versions): pip lists those unmet requirements here, as expected.
    "${pip[@]}" install -q -r "$HERE/requirements.txt"
    "${pip[@]}" install -q --no-deps nixl==1.5.1  # vLLM's `import nixl` (requirements.txt)
    "$VENV/bin/python" -c "import vllm.v1.kv_offload.tiering.fs.manager, vllm.v1.kv_offload.tiering.obj.manager"
    echo "$stamp" >"$marker"
    echo "vLLM $VLLM_VERSION venv $VENV ready in $((SECONDS - start)) s"
}

setup() {
    deps
    link
}

# Unpack vLLM's sdist with pip into $1 and copy its tier tests to $1/tests.
# pip cannot build vLLM's metadata here (no CUDA toolchain); with
# --no-clean it keeps the unpacked tree all the same.
fetch_tests() {
    local work=$1
    mkdir -p "$work/pip-tmp" "$work/tests"
    TMPDIR="$work/pip-tmp" "$PY" -m pip download --no-deps --no-binary vllm --no-build-isolation --no-clean \
        -d "$work/dist" "vllm==$VLLM_VERSION" >"$work/pip-download.log" 2>&1 || true
    local sdist
    for sdist in "$work"/dist/vllm-*.tar.gz; do  # if pip did build the metadata, it kept the archive
        [ -f "$sdist" ] && tar -xzf "$sdist" -C "$work/pip-tmp"
    done
    local found
    found=$(find "$work/pip-tmp" -path '*/tests/v1/kv_offload/tiering/test_fs_tier.py' -print -quit)
    if [ -z "$found" ]; then
        cat "$work/pip-download.log" >&2
        echo "vLLM $VLLM_VERSION's sdist did not give tests/v1/kv_offload/tiering/" >&2
        return 1
    fi
    local f
    for f in "${TEST_FILES[@]}"; do
        cp "$(dirname "$found")/$f" "$work/tests/"
    done
    rm -rf "$work/pip-tmp" "$work/dist"
}

run_tests() {
    local work repo
    repo=$(pwd)
    work=$(mktemp -d)
    fetch_tests "$work" || { rm -rf "$work"; return 1; }
    local pytest=("$VENV/bin/python" -m pytest -p no:cacheprovider -p kvprobe_switch -o timeout=120 -q)
    local status=0
    # First: engine processes exiting against a slow, throttling store
    # (minutes, mostly waiting), so that beside other jobs their waits
    # overlap work rather than end the run.
    echo "== engine processes exiting with lookups in flight (vLLM $VLLM_VERSION)"
    KVPROBE_REQUIRE_VLLM=1 "$VENV/bin/python" -m pytest -q tests/engine/test_exit_in_flight.py || status=1
    echo "== vLLM $VLLM_VERSION's tier tests on vLLM's own AsyncLookupManager"
    (cd "$work/tests" && PYTHONPATH="$repo/$HERE" "${pytest[@]}" --lookup-manager=vllm "${TEST_FILES[@]}") || status=1
    echo "== the same tests with the one-line switch to kvprobe's drop-in"
    (cd "$work/tests" && PYTHONPATH="$repo/$HERE" "${pytest[@]}" --lookup-manager=kvprobe "${TEST_FILES[@]}") || status=1
    echo "== the fs and obj tier tests on kvprobe's own tiers (ObjTier, FsTier; tiers_expected_failures.toml)"
    (cd "$work/tests" && PYTHONPATH="$repo/$HERE" "${pytest[@]}" --lookup-manager=tiers test_fs_tier.py test_obj_tier.py) || status=1
    # Two runs: the tier-poll test switches vLLM's module to the drop-in, the
    # differences test needs vLLM's own class.
    echo "== this repository's tests that need vLLM $VLLM_VERSION"
    export KVPROBE_REQUIRE_VLLM=1
    "$VENV/bin/python" -m pytest -q tests/engine/test_vllm_differences.py || status=1
    "$VENV/bin/python" -m pytest -q tests/engine/test_vllm_release_tier_poll.py || status=1
    "$VENV/bin/python" -m pytest -q tests/engine/test_vllm_tiers.py tests/engine/test_vllm_tiers_config.py \
        tests/engine/test_vllm_tiers_bench.py || status=1
    "$VENV/bin/python" -m pytest -q -s tests/engine/test_vllm_release_positions.py || status=1
    rm -rf "$work"
    return "$status"
}

case "${1:-all}" in
    deps) deps ;;
    link) link ;;
    setup) setup ;;
    test) run_tests ;;
    all) setup && run_tests ;;
    *) echo "usage: $0 [deps|link|setup|test|all]" >&2; exit 2 ;;
esac
