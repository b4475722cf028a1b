#!/usr/bin/env bash
# Prepare a Debian 12 machine for building and testing sframe-gdb (as root).
#
#   scripts/setup.sh
#
# Installs the Debian packages below that are missing (apt is not touched at
# all when every one is present, so a second run is quick), then builds or
# refreshes the cached Debian roots (scripts/roots.sh: trixie for SFrame V2,
# sid for V3 with cross compilers, qemu-user, GDB 18 and LLDB 21).
# Needs no terminal: safe for CI.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
    debootstrap     # builds the roots
    gcc libc6-dev binutils   # host toolchain: SFrame V1
    gdb             # GDB 13, embedded Python 3.11
    lldb-16 python3-lldb-16
    python3-pyelftools python3-pytest python3-pexpect python3-hypothesis python3-venv
    python3-pip python3-setuptools python3-wheel   # installing this checkout (the sframe command)
    util-linux      # unshare, findmnt (scripts/inroot)
    elfutils        # eu-stack: what bench/ compares `sframe backtrace` with
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
    echo "setup: installing ${missing[*]}" >&2
    apt_retry apt-get update -q
    apt_retry apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
else
    echo "setup: Debian packages already installed" >&2
fi

# The `sframe` command: a link to this checkout's scripts/sframe, so it always runs the code of
# the checkout it was set up from.  An editable pip install of an older layout (which claimed the
# top-level name `core` in Debian's Python, the one GDB 13 embeds) is removed.
REPO=$(cd "$HERE/.." && pwd)
if /usr/bin/python3 -m pip show -q sframe-gdb >/dev/null 2>&1; then
    echo "setup: removing the pip-installed sframe-gdb from Debian's Python" >&2
    /usr/bin/python3 -m pip uninstall -y -q --break-system-packages sframe-gdb </dev/null >&2
fi
if [ "$(readlink /usr/local/bin/sframe 2>/dev/null)" != "$REPO/scripts/sframe" ]; then
    echo "setup: linking /usr/local/bin/sframe to $REPO/scripts/sframe" >&2
    ln -sf "$REPO/scripts/sframe" /usr/local/bin/sframe
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
