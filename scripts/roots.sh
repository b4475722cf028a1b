#!/usr/bin/env bash
# Build (once) and cache the Debian roots whose toolchains emit SFrame V2 and V3.
#
#   scripts/roots.sh            build/refresh every root, print their paths
#   scripts/roots.sh path NAME  print the path of root NAME (trixie|sid|lldb23)
#   scripts/roots.sh mirror     print the Debian mirror the roots come from: $SFRAME_MIRROR, else the
#                               one this machine's apt uses (without either, it asks for $SFRAME_MIRROR)
#
# Roots live outside the checkout, under $SFRAME_CACHE (default ~/.cache/sframe-gdb).
# A root is rebuilt when its package list below changes (the list's hash is stored
# in the root as .sframe-stamp).  Building happens in a temporary directory renamed
# into place, under a lock, so an interrupted build never leaves a half root behind.
# Packages added later (the *_MORE lists) are installed into an existing root in place
# (stamped .sframe-more-stamp), so that adding a compiler does not rebuild a root.
set -euo pipefail

CACHE=${SFRAME_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sframe-gdb}
# The Debian archive this machine's apt already uses: the first `deb` source whose URI ends in /debian,
# in the files apt reads (apt-config names them; one-line .list and deb822 .sources formats).
apt_mirror() {
    local LIST="" PARTS="" f
    eval "$(apt-config shell LIST Dir::Etc::sourcelist/f PARTS Dir::Etc::sourceparts/d 2>/dev/null)" || true
    for f in "$LIST" "${PARTS%/}"/*.list "${PARTS%/}"/*.sources; do
        [ -r "$f" ] || continue
        case "$f" in
            *.sources)   # deb822: stanzas separated by blank lines; Types and URIs fields
                awk 'BEGIN { RS = ""; FS = "\n" }
                     { deb = 0; uris = ""
                       for (i = 1; i <= NF; i++) {
                           if ($i ~ /^[ \t]*#/) continue
                           n = split($i, w, /[ \t]+/); key = tolower(w[1])
                           if (key == "types:") for (j = 2; j <= n; j++) if (w[j] == "deb") deb = 1
                           if (key == "uris:") for (j = 2; j <= n; j++) uris = uris " " w[j]
                           if (key == "enabled:" && tolower(w[2]) == "no") deb = 0
                       }
                       if (deb) { n = split(uris, u, " "); for (j = 1; j <= n; j++) print u[j] } }' "$f" ;;
            *)           # one line per source: deb [options] URI suite components
                sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" { print $2 }' ;;
        esac
    done | sed 's:/*$::' | grep -m1 -E '^(https?|ftp|file):.*/debian$' || true
}

MIRROR=${SFRAME_MIRROR:-$(apt_mirror)}
need_mirror() {  # no archive's host name is written here: the machine's apt names it, or the user
    [ -n "$MIRROR" ] && return 0
    echo "roots: this machine's apt names no Debian archive (a deb source whose URI ends in /debian):" \
         "set SFRAME_MIRROR to one, e.g. SFRAME_MIRROR=http://HOST/debian" >&2
    exit 2
}

# name | debootstrap --include | packages installed afterwards with apt-get
TRIXIE_INCLUDE="gcc,binutils,libc6-dev,gdb"
# Debian 13's debuggers, the ones most Debian users have: GDB 16 (above) and LLDB 19; pyelftools
# for the plugin inside them.
TRIXIE_EXTRA="lldb-19 python3-lldb-19 python3-pyelftools"
SID_INCLUDE="gcc,binutils,libc6-dev,gdb,python3"
# LLDB 23 (scripted frame providers) in a root of its own: python3-lldb-NN packages of different
# versions cannot be installed together.  Its programs are built in the sid root (same C library).
LLDB23_INCLUDE="python3"
LLDB23_EXTRA="lldb-23 python3-lldb-23 python3-pyelftools"
SID_EXTRA="lldb python3-lldb python3-pyelftools clang-23 llvm-23 gdb-multiarch qemu-user gcc-aarch64-linux-gnu gcc-s390x-linux-gnu libc6-dev-arm64-cross libc6-dev-s390x-cross"
# Installed afterwards into a root that has the lists above: C++ compilers for the real C++
# program of tests/helpers/realprogs.py; valgrind, for bench/bench_zerocost.py --count (GDB's instructions).
TRIXIE_MORE="g++ valgrind gdbserver"
SID_MORE="g++ g++-aarch64-linux-gnu g++-s390x-linux-gnu valgrind gdbserver"
LLDB23_MORE=""

spec() {
    case "$1" in
        trixie) echo "trixie|$TRIXIE_INCLUDE|$TRIXIE_EXTRA" ;;
        sid) echo "sid|$SID_INCLUDE|$SID_EXTRA" ;;
        lldb23) echo "sid|$LLDB23_INCLUDE|$LLDB23_EXTRA" ;;
        *) echo "unknown root: $1" >&2; exit 2 ;;
    esac
}

more() {
    case "$1" in
        trixie) echo "$TRIXIE_MORE" ;;
        sid) echo "$SID_MORE" ;;
        lldb23) echo "$LLDB23_MORE" ;;
    esac
}

stamp_of() { spec "$1" | sha256sum | cut -c1-16; }
more_stamp_of() { more "$1" | sha256sum | cut -c1-16; }

# apt_install NAME ROOT PACKAGES: install PACKAGES in ROOT (two tries; a transient network
# failure gets a second one).
apt_install() {
    local name=$1 root=$2 pkgs=$3 try
    for try in 1 2; do
        echo "roots: $name: installing $pkgs" >&2
        if run_logged "$name: apt-get install" "$CACHE/roots/$name.log" unshare --mount --propagation private \
                chroot "$root" sh -c \
                "apt-get -o Acquire::Check-Valid-Until=false update && \
                 DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs && \
                 apt-get clean"; then
            return 0
        fi
        echo "roots: installing packages in $name failed (try $try)" >&2
    done
    echo "roots: installing packages in $name failed, see $CACHE/roots/$name.log" >&2
    exit 1
}

# The *_MORE packages, into a root built before they were listed.
add_more() {
    local name=$1 dir="$CACHE/roots/$1" stamp pkgs
    stamp=$(more_stamp_of "$name")
    pkgs=$(more "$name")
    if [ -z "$pkgs" ] || { [ -f "$dir/.sframe-more-stamp" ] && [ "$(cat "$dir/.sframe-more-stamp")" = "$stamp" ]; }; then
        return 0
    fi
    rm -f "$dir/.sframe-more-stamp"
    apt_install "$name" "$dir" "$pkgs"
    echo "$stamp" >"$dir/.sframe-more-stamp"
}

mounted_inside() { findmnt -rn -o TARGET | grep -q "^$1/" ; }

# Every 20 seconds while a long step runs: how long so far, how many packages its log shows
# fetched, unpacked and set up, and its last line.
ticker() {
    local what=$1 log=$2 start=$SECONDS n last
    while sleep 20; do
        n=$(grep -c -E '^(I: (Retrieving|Extracting|Unpacking|Configuring)|Get:|Unpacking|Setting up) ' "$log" || true)
        last=$(tail -n 1 "$log" | tr -d '\r' | cut -c1-70)
        echo "roots: $what: $((SECONDS - start)) s, $n package steps so far (last: $last)" >&2
    done
}

# run_logged WHAT LOG CMD...: CMD with its output appended to LOG, and the ticker on stderr.
run_logged() {
    local what=$1 log=$2 tick rc=0
    shift 2
    ticker "$what" "$log" &
    tick=$!
    "$@" >>"$log" 2>&1 </dev/null || rc=$?
    kill "$tick" 2>/dev/null || true
    wait "$tick" 2>/dev/null || true
    return $rc
}

build() {
    local name=$1 dir="$CACHE/roots/$1" stamp
    stamp=$(stamp_of "$name")
    if [ -f "$dir/.sframe-stamp" ] && [ "$(cat "$dir/.sframe-stamp")" = "$stamp" ]; then
        add_more "$name"
        return 0
    fi
    IFS='|' read -r suite include extra <<<"$(spec "$name")"
    local tmp="$CACHE/roots/.$name.new"
    need_mirror
    if mounted_inside "$tmp" || mounted_inside "$dir"; then
        echo "roots: something is still mounted inside $dir; refusing to rebuild it" >&2
        exit 1
    fi
    echo "roots: building the $name root in $dir: debootstrap $suite from $MIRROR, then" \
         "$(wc -w <<<"$extra") more packages; a few minutes (log: $CACHE/roots/$name.log)" >&2
    : >"$CACHE/roots/$name.log"
    # debootstrap and apt run in a private mount namespace: whatever they
    # mount inside the new root (/proc, /sys) goes away with them, even if
    # they are killed.  A transient network failure gets a second try.
    local try ok=0
    for try in 1 2; do
        rm -rf --one-file-system "$tmp"
        if run_logged "$name: debootstrap $suite" "$CACHE/roots/$name.log" unshare --mount --propagation private \
                debootstrap --variant=minbase --include="$include" "$suite" "$tmp" "$MIRROR"; then
            ok=1; break
        fi
        echo "roots: debootstrap $suite failed (try $try)" >&2
    done
    [ "$ok" = 1 ] || { echo "roots: debootstrap $suite failed, see $CACHE/roots/$name.log" >&2; exit 1; }
    extra="$extra $(more "$name")"
    if [ -n "${extra// /}" ]; then
        apt_install "$name" "$tmp" "$extra"
    fi
    echo "$stamp" >"$tmp/.sframe-stamp"
    more_stamp_of "$name" >"$tmp/.sframe-more-stamp"
    rm -rf --one-file-system "$dir"
    mv "$tmp" "$dir"
    echo "roots: the $name root is ready" >&2
}

mkdir -p "$CACHE/roots"
case "${1:-all}" in
    path) echo "$CACHE/roots/$2" ;;
    mirror) need_mirror; echo "$MIRROR" ;;
    all)
        exec 9>"$CACHE/roots/.lock"
        flock 9
        for r in trixie sid lldb23; do build "$r"; echo "$CACHE/roots/$r"; done
        ;;
    *) exec 9>"$CACHE/roots/.lock"; flock 9; build "$1"; echo "$CACHE/roots/$1" ;;
esac
