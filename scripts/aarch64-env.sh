#!/usr/bin/env bash
# An aarch64 CPython environment on an x86-64 host, and the aarch64 test stage run in it.
#
#   scripts/aarch64-env.sh build        build (or find) the environment; prints its directory
#   scripts/aarch64-env.sh test [ARGS]  run `pytest -m aarch64` on the marked test files, natively
#                                       JIT-compiled and executed under qemu-aarch64-static -cpu max
#   scripts/aarch64-env.sh python ARGS  the aarch64 python3.11 (SCRIPT ARGS, -m MODULE ARGS or -c CODE),
#                                       with the wheels and the repo on sys.path
#   scripts/aarch64-env.sh dir          the environment's directory (built or not)
#
# Recipe (measured on these hosts; see the README's "AArch64" section):
#   debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,libblas3,liblapack3 bookworm ROOT
#   dpkg-deb -x every .deb of ROOT/var/cache/apt/archives into ROOT (no second stage, no chroot)
#   pip install --target SITE --platform manylinux2014_aarch64 --python-version 3.11 --only-binary=:all: ...
#   qemu-aarch64-static -cpu max -L ROOT ROOT/usr/bin/python3.11 -I ...  (called explicitly: no binfmt_misc)
# The environment is cached under ~/.cache/loopstack/aarch64/<hash of the recipe>; changing the
# recipe below builds a new one. Needs root only for apt-get (qemu-user-static, debootstrap).
set -euo pipefail

SUITE=bookworm
DEBS=python3,libblas3,liblapack3
WHEELS="numpy cffi pytest hypothesis capstone"
PYVER=3.11
RECIPE="v1|$SUITE|$DEBS|$WHEELS|$PYVER|manylinux2014_aarch64"

REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${LOOPSTACK_AARCH64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loopstack/aarch64}"
KEY="$(printf '%s' "$RECIPE" | sha256sum | cut -c1-16)"
ENV_DIR="$CACHE/$KEY"
ROOT="$ENV_DIR/root"
SITE="$ENV_DIR/site"
QEMU="$(command -v qemu-aarch64-static || true)"

log() { printf 'aarch64-env: %s\n' "$*" >&2; }

need_tools() {
    if [ -n "$QEMU" ] && command -v debootstrap >/dev/null; then return 0; fi
    if [ "$(id -u)" != 0 ]; then
        log "qemu-user-static and debootstrap are missing; as root: apt-get install qemu-user-static debootstrap"
        exit 1
    fi
    log "installing qemu-user-static and debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static debootstrap >/dev/null
    QEMU="$(command -v qemu-aarch64-static)"
}

build() {
    if [ -f "$ENV_DIR/.complete" ]; then echo "$ENV_DIR"; return 0; fi
    need_tools
    local tmp="$ENV_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    log "debootstrap $SUITE arm64 ($DEBS) -> $ENV_DIR"
    debootstrap --foreign --arch=arm64 --variant=minbase --include="$DEBS" "$SUITE" "$tmp/root" \
        >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
    # the second stage would need a chroot: unpack the packages instead (maintainer scripts are
    # not needed to run python3 from the tree)
    for deb in "$tmp"/root/var/cache/apt/archives/*.deb; do
        dpkg-deb -x "$deb" "$tmp/root"
    done
    log "pip wheels for manylinux2014_aarch64 / cp${PYVER/./}: $WHEELS"
    python3 -m pip install -q --disable-pip-version-check --target "$tmp/site" \
        --platform manylinux2014_aarch64 --python-version "$PYVER" --only-binary=:all: $WHEELS
    rm -rf "$tmp"/root/var/cache/apt/archives/*.deb
    "$QEMU" -cpu max -L "$tmp/root" "$tmp/root/usr/bin/python$PYVER" -I -c \
        "import sys; sys.path.insert(0, '$tmp/site'); import numpy, cffi; print('aarch64 python', sys.version.split()[0], 'numpy', numpy.__version__)" >&2
    rm -rf "$ENV_DIR"
    mv "$tmp" "$ENV_DIR"
    touch "$ENV_DIR/.complete"
    echo "$ENV_DIR"
}

# python ARGS: sys.path gets SITE and the repository (-I ignores PYTHONPATH and the user site)
run_python() {
    [ -f "$ENV_DIR/.complete" ] || { log "not built: run $0 build"; exit 3; }
    [ -n "$QEMU" ] || { log "qemu-aarch64-static is missing"; exit 3; }
    cd "$REPO"
    exec "$QEMU" -cpu max -L "$ROOT" "$ROOT/usr/bin/python$PYVER" -I -c "
import sys
sys.path[:0] = ['$SITE', '$REPO']
sys.argv = sys.argv[1:] or ['']
import runpy
if sys.argv[0] == '-m':
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
elif sys.argv[0] == '-c':
    code, sys.argv = sys.argv[1], ['-c'] + sys.argv[2:]
    exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})
else:
    runpy.run_path(sys.argv[0], run_name='__main__')
" "$@"
}

# test ARGS: the files that use the aarch64 marker, `-m aarch64`
run_tests() {
    cd "$REPO"
    mapfile -t files < <(grep -rlE 'pytest\.mark\.aarch64|mark\.aarch64' tests --include='test_*.py' | sort)
    [ "${#files[@]}" -gt 0 ] || { log "no test file uses the aarch64 marker"; exit 3; }
    HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" run_python -m pytest -q -p no:cacheprovider -m aarch64 \
        "${files[@]}" "$@"
}

case "${1:-build}" in
    build) build ;;
    dir) echo "$ENV_DIR" ;;
    python) shift; run_python "$@" ;;
    test) shift; run_tests "$@" ;;
    *) log "usage: $0 build | test [pytest args] | python ARGS | dir"; exit 2 ;;
esac
