#!/usr/bin/env bash
# Prepare a Debian 12 machine for building and testing sframe-gdb (as root).
#
#   scripts/setup.sh          everything the tests need
#   scripts/setup.sh --host   only the host's packages (what scripts/demo and the plugin need)
#
# Installs the Debian packages below that are missing (apt is not touched at
# all when every one is present, so a second run is quick), then the pinned
# linters and the cached Debian roots (scripts/roots.sh: trixie for SFrame V2,
# sid for V3 with cross compilers, qemu-user, GDB 18 and LLDB 21).  What it changes
# on the machine: those Debian packages, and $SFRAME_CACHE (~/.cache/sframe-gdb).
# Needs no terminal: safe for CI.
set -euo pipefail
HOST_ONLY=0
case "${1:-}" in
    --host) HOST_ONLY=1 ;;
    "") ;;
    *) echo "usage: scripts/setup.sh [--host]" >&2; exit 2 ;;
esac

HERE=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
    debootstrap     # builds the roots
    gcc libc6-dev binutils   # host toolchain: SFrame V1
    gdb             # GDB 13, embedded Python 3.11
    lldb-16 python3-lldb-16
    python3-pyelftools python3-pytest python3-pexpect python3-hypothesis python3-venv
    python3-pytest-xdist   # the suite on both cores (scripts/test: -n 2)
    python3-pip python3-setuptools python3-wheel   # installing this checkout (the sframe command)
    util-linux      # unshare, findmnt (scripts/inroot)
    elfutils        # eu-stack: what bench/ compares `sframe backtrace` with
    debuginfod      # elfutils' server: tests/test_debuginfod.py serves side files with it
    gdbserver       # tests/test_remote.py: GDB on remote targets whose files are not on this machine
    valgrind        # bench/bench_zerocost.py --count: GDB's instructions, not its time
)

if [ "$(id -u)" -ne 0 ]; then
    echo "setup: must run as root (apt-get, debootstrap, chroot, mount namespaces)" >&2
    exit 1
fi

installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
done

apt_retry() {  # apt can meet a transient network error: try a few times
    local i
    for i in 1 2 3; do
        if "$@" </dev/null; then return 0; fi
        echo "setup: '$*' failed (try $i)" >&2
        sleep $((i * 5))
    done
    return 1
}

if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: [1/2] apt-get update" >&2
    apt_retry apt-get update -q >&2
    echo "setup: [2/2] installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
    apt_retry apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" >&2
else
    echo "setup: Debian packages already installed" >&2
fi

# Nothing machine-wide points into a checkout: the `sframe` command is the checkout's own
# scripts/sframe, or `pip install .` into a virtual environment (README).  What older set-ups left
# is removed: the link /usr/local/bin/sframe into a checkout (it dangled once that checkout was
# gone), and an editable pip install that claimed the top-level name `core` in Debian's Python.
if /usr/bin/python3 -m pip show -q sframe-gdb >/dev/null 2>&1; then
    echo "setup: removing the pip-installed sframe-gdb from Debian's Python" >&2
    /usr/bin/python3 -m pip uninstall -y -q --break-system-packages sframe-gdb </dev/null >&2
fi
link=$(readlink /usr/local/bin/sframe 2>/dev/null || true)
if [ -n "$link" ] && [ "${link%/scripts/sframe}" != "$link" ]; then
    echo "setup: removing the link /usr/local/bin/sframe -> $link (use scripts/sframe, or pip install .)" >&2
    rm -f /usr/local/bin/sframe
fi
if [ "$HOST_ONLY" = 1 ]; then
    echo "setup: done (host packages only)" >&2
    exit 0
fi

# The linters (ruff, mypy), pinned, in their own virtual environment in the cache: they are
# development tools, not dependencies of the plugin.
LINT="${SFRAME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sframe-gdb}/lint"
LINT_PINS=(ruff==0.17.6 mypy==2.4.1)
if [ "$(cat "$LINT/.pins" 2>/dev/null)" != "${LINT_PINS[*]}" ]; then
    echo "setup: installing ${LINT_PINS[*]} into $LINT" >&2
    rm -rf "$LINT"
    /usr/bin/python3 -m venv "$LINT"
    apt_retry "$LINT/bin/pip" install -q "${LINT_PINS[@]}" >&2
    echo "${LINT_PINS[*]}" >"$LINT/.pins"
fi

bash "$HERE/roots.sh" >&2
echo "setup: done" >&2
