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

# The `sframe` command: this checkout installed in editable mode into Debian's Python (the one
# GDB 13 embeds), so it always runs the code of the checkout it was installed from.
REPO=$(cd "$HERE/.." && pwd)
where=$(cd / && /usr/bin/python3 -c 'import core.cli, os; print(os.path.dirname(os.path.dirname(core.cli.__file__)))' 2>/dev/null || true)
if [ "$where" != "$REPO" ] || ! command -v sframe >/dev/null; then
    echo "setup: installing $REPO (pip install -e) for the sframe command" >&2
    /usr/bin/python3 -m pip install -q --break-system-packages --no-build-isolation --no-deps -e "$REPO" </dev/null >&2
fi

bash "$HERE/roots.sh" >&2
echo "setup: done" >&2
