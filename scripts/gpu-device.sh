#!/usr/bin/env bash
# The GPU checks, prepared to run in one call on a machine with an NVIDIA GPU.
#
#   scripts/gpu-device.sh wheels   on a host with pip access: the wheels a bare GPU image lacks
#                                  (cffi, pycparser; CPython 3.12, manylinux x86-64) into .whl/
#   scripts/gpu-device.sh run      on the GPU host: install .whl/ into /tmp/site, then, each under its
#                                  own time limit, the GPU tests (the driver tests run for real), the
#                                  GPU fuzzer with its `device` target (every kernel on the GPU against
#                                  numpy and the interpreter) and bench/gpu.py against cuBLAS / cuDNN:
#                                  default knobs, the model's search, and the search whose best
#                                  candidates are timed on the GPU; logs and JSON go to $OUT
#                                  (./gpu-out where OUT is unset)
#
# The limits add up to under nine minutes, so that one ten-minute call holds the whole run; a step
# that runs out is cut off and the next one still runs (bench/gpu.py writes its JSON after every
# kernel, so a cut-off run keeps what it measured). The GPU's image is expected to hold numpy,
# torch, pytest, hypothesis and ml_dtypes (bench/gpu.py's peer is torch).
set -uo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-python3}"

wheels() {
    "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl cffi pycparser
}

step() {    # step SECONDS NAME COMMAND...: run with a limit, output to the console and $OUT/NAME.log
    local limit=$1 name=$2
    shift 2
    echo "=== $name (limit ${limit} s)"
    local t0=$SECONDS
    timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
}

run() {
    OUT="${OUT:-$REPO/gpu-out}"
    mkdir -p "$OUT"
    if ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || exit 1
    fi
    export PYTHONPATH="/tmp/site:$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    nvidia-smi -L 2>&1 | tee "$OUT/gpu.txt"
    "$PY" -c "from loopstack.isa.ptx import driver; d = driver.driver(); print('driver ok, compute capability',
        d.capability())" 2>&1 | tee -a "$OUT/gpu.txt"
    step 120 tests "$PY" -m pytest -q -p no:cacheprovider tests/gpu
    step 100 fuzz "$PY" bench/fuzz_gpu.py --n 400 --seed 1 --jobs "$(( $(nproc) > 12 ? 12 : $(nproc) ))" \
        --targets host --quiet --json "$OUT/fuzz_gpu.json"
    step 120 bench "$PY" bench/gpu.py --json "$OUT/gpu.json"
    step 80 bench-search "$PY" bench/gpu.py --search --json "$OUT/gpu-search.json"
    step 100 bench-tune "$PY" bench/gpu.py --tune --json "$OUT/gpu-tune.json"
}

case "${1:-}" in
    wheels) wheels ;;
    run) run ;;
    *) echo "usage: scripts/gpu-device.sh wheels|run" >&2; exit 2 ;;
esac
