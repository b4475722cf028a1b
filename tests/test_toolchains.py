"""The toolchains and the fixture corpus: every build carries .sframe of the
expected version, shows the frame shapes its fixture promises, and runs.

The shape checks read the section in two independent ways: the text of
`readelf --sframe` (sid's binutils 2.47 for V2/V3, the host's 2.40 for V1)
and a deliberately small decoder below (FDE and FRE headers only), which also
sees what readelf does not print (FRE start-offset and data-word sizes)."""

import functools
import os
import re
import struct
import subprocess
import time

import pytest
from helpers import toolchains as tcs

PLAN = tcs.corpus_plan()
IDS = ["-".join(k) for k in PLAN]
X86 = [t for t in tcs.TOOLCHAINS if tcs.toolchain(t).arch == "x86_64"]


def plan_for(fixture=None, variant=None, toolchain=None):
    keys = [k for k in PLAN
            if (fixture is None or k[1] == fixture)
            and (variant is None or k[2] == variant)
            and (toolchain is None or k[0] in toolchain)]
    return pytest.mark.parametrize("key", keys, ids=["-".join(k) for k in keys])


# --------------------------------------------------------------------------
# A small, independent SFrame reader (headers, FDEs, FRE info only).

_WORD_SIZES = {0: 1, 1: 2, 2: 4}


def decode_sframe(data: bytes, endian: str, addr: int):
    """-> (version, flags, [fde dict]).  Each fde: pc, size, fre_type,
    mask, fde_type (V3 info2), signal (V3), pauth_key, rep_size, fres:
    [dict(start, base (1 SP / 0 FP), n, wsz, mangled, words)]."""
    e = "<" if endian == "little" else ">"
    (magic, ver, flags, _abi, _ffp, _fra, aux, nfdes, _nfres, _frelen, fdeoff,
     freoff) = struct.unpack_from(e + "HBBBbbBIIIII", data, 0)
    assert magic == tcs.SFRAME_MAGIC
    hdr = 28 + aux
    recsize = {1: 17, 2: 20, 3: 16}[ver]
    fre_base = hdr + freoff
    fdes = []
    for i in range(nfdes):
        off = hdr + fdeoff + i * recsize
        if ver == 3:
            start, size, sfo = struct.unpack_from(e + "qII", data, off)
            num, info, info2, rep = struct.unpack_from(e + "HBBB", data, fre_base + sfo)
            p = fre_base + sfo + 5
        else:
            start, size, sfo, num, info = struct.unpack_from(e + "iIIIB", data, off)
            info2, rep = 0, (data[off + 17] if ver == 2 else 0)
            p = fre_base + sfo
        pcrel = ver == 3 or bool(flags & 0x4)
        pc = addr + off + start if pcrel else addr + start
        asz = _WORD_SIZES[info & 0xF]
        fres = []
        for _ in range(num):
            s = int.from_bytes(data[p:p + asz], endian)
            fi = data[p + asz]
            p += asz + 1
            n, wsz = (fi >> 1) & 0xF, _WORD_SIZES[(fi >> 5) & 3]
            words = [int.from_bytes(data[p + k * wsz:p + (k + 1) * wsz], endian, signed=True)
                     for k in range(n)]
            p += n * wsz
            fres.append(dict(start=s, base=fi & 1, n=n, wsz=wsz, mangled=fi >> 7, words=words))
        fdes.append(dict(pc=pc, size=size, fre_type=info & 0xF, mask=(info >> 4) & 1,
                         pauth_key=(info >> 5) & 1, signal=(info >> 7) if ver == 3 else 0,
                         fde_type=info2 & 0x1F, rep_size=rep, fres=fres))
    return ver, flags, fdes


@functools.lru_cache(maxsize=None)
def decoded(path):
    return decode_sframe(*tcs.sframe_section(path))


@functools.lru_cache(maxsize=None)
def symbols(path):
    return tcs.function_symbols(path)


@functools.lru_cache(maxsize=None)
def readelf(path, version):
    """Parsed readelf text by the readelf that can print this version."""
    which = "host" if version == 1 else "sid"
    return tcs.parse_readelf_sframe(tcs.readelf_sframe(path, which))


def fde_of(path, name):
    """Decoded FDE of function `name` (starting at its symbol), or None."""
    addr = symbols(path)[name][0]
    for f in decoded(path)[2]:
        if f["pc"] == addr:
            return f
    return None


def readelf_fde_of(build, name, path=None):
    path = path or build.path
    return readelf(path, build.version).at(symbols(path)[name][0])


def section_range(path, name):
    """(address, size) of a section, or None."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(name)
        return None if sec is None else (sec["sh_addr"], sec["sh_size"])


def section_names(path):
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return {s.name for s in ELFFile(f).iter_sections()}


# Entry CFA offset as readelf prints it: sp+8 (x86-64: the return address is
# pushed), sp+0 (AArch64: it is in x30), sp+160 (s390x: the register save area).
ENTRY_CFA = {"x86_64": "sp+8", "aarch64": "sp+0", "s390x": "sp+160"}


def _bigfunc_value():
    v = 1
    for _ in range(5120):
        v = (v * 5 + 1) & 0xFFFFFFFF
    return v


EXPECTED_OUTPUT = {
    "frames": ["frames: hello (5)", "frames: done"],
    "alloca": [f"alloca: {ord('v') + ord('a')}"],
    "realign": ["realign: 60 2"],
    "bigframe": ["bigframe: 14"],
    "bigfunc": [f"bigfunc: {_bigfunc_value():08x}"],
    "signal": ["signal: 1010"],
    "dlopen": ["dlopen: 54"],
    "recurse": ["recurse: 50 100"],
    "threads": ["threads: 106 15"],
    "shrinkwrap": ["shrinkwrap: 82 60"],
    "floats": ["floats: 425.000"],
}


# --------------------------------------------------------------------------
# scripts/inroot


def _mounts_under(path):
    prefix = os.path.realpath(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if ln.split()[4].startswith(prefix)
                or ln.split()[4] == prefix[:-1]]


@pytest.mark.parametrize("root", ["trixie", "sid"])
def test_inroot_status_binds_and_private_mounts(roots, root, tmp_path):
    assert tcs.run_in(root, ["sh", "-c", "exit 7"]).returncode == 7
    # cwd, /tmp and the checkout are at their own paths inside the root.
    (tmp_path / "marker").write_text("here\n")
    p = tcs.run_in(root, ["sh", "-c", f"pwd; cat marker; test -f {tcs.REPO}/tests/helpers/toolchains.py"
                          " && test -e /proc/self/maps && test -c /dev/null && test -d /sys/kernel"
                          " && echo ok"], cwd=tmp_path, check=True)
    assert p.stdout.split() == [str(tmp_path), "here", "ok"]
    # While a command runs in the root, the host namespace has nothing mounted in it.
    argv, env = tcs.wrap_argv(root, ["sleep", "3"])
    proc = subprocess.Popen(argv, env=env)
    try:
        time.sleep(1.0)
        assert proc.poll() is None
        assert _mounts_under(roots[root]) == []
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert _mounts_under(roots[root]) == []


def test_inroot_rejects_missing_bind(roots):
    env = dict(os.environ, SFRAME_BINDS="/nonexistent-sframe-bind")
    p = subprocess.run(["bash", str(tcs.INROOT), "sid", "true"], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 2 and "cannot bind" in p.stderr



def _mirror(tmp_path, files, **env):
    """(exit status, stdout, stderr) of scripts/roots.sh mirror, with apt reading only `files`."""
    parts = tmp_path / "sources.list.d"
    parts.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (parts / name).write_text(text)
    conf = tmp_path / "apt.conf"
    conf.write_text('Dir::Etc::sourcelist "/dev/null";\nDir::Etc::sourceparts "%s";\n' % parts)
    env = dict({k: v for k, v in os.environ.items() if k != "SFRAME_MIRROR"}, APT_CONFIG=str(conf), **env)
    p = subprocess.run(["bash", str(tcs.REPO / "scripts" / "roots.sh"), "mirror"], env=env,
                       capture_output=True, text=True)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def test_roots_come_from_the_mirror_apt_uses(tmp_path):
    """The roots are fetched from the mirror this machine's apt already uses (deb822 or one-line
    sources; comments, deb-src, options and disabled stanzas ignored); SFRAME_MIRROR overrides;
    without either the script names no host of its own: it asks for SFRAME_MIRROR."""
    deb822 = ("Types: deb-src\nURIs: http://src.example/debian\nSuites: sid\nComponents: main\n\n"
              "Types: deb\nURIs: http://deb.example/debian\nSuites: sid\nEnabled: no\n\n"
              "# URIs: http://commented.example/debian\n"
              "Types: deb deb-src\nURIs: http://one.example/debian/\nSuites: trixie\nComponents: main\n\n"
              "Types: deb\nURIs: http://security.example/debian-security\nSuites: trixie-security\n")
    assert _mirror(tmp_path, {"debian.sources": deb822}) == (0, "http://one.example/debian", "")
    one_line = ("# deb http://commented.example/debian sid main\n"
                "deb-src http://src.example/debian sid main\n"
                "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://two.example/debian bookworm main\n")
    assert _mirror(tmp_path / "a", {"mirror.list": one_line}) == (0, "http://two.example/debian", "")
    status, out, err = _mirror(tmp_path / "b", {"other.list": "deb https://node.example/node_20.x nodistro main\n"})
    assert (status, out) == (2, "") and "set SFRAME_MIRROR" in err, err
    assert _mirror(tmp_path / "b", {}, SFRAME_MIRROR="http://local/debian") == (0, "http://local/debian", "")
    assert _mirror(tmp_path / "c", {"debian.sources": deb822}, SFRAME_MIRROR="http://local/debian") \
        == (0, "http://local/debian", "")


# --------------------------------------------------------------------------
# Every build: section, version, runs


def test_corpus_is_complete(corpus):
    assert [b.key for b in corpus] == PLAN
    for b in corpus:
        assert b.path.is_file() and b.noeh.is_file()
        assert b.version == {"host": 1, "trixie": 2}.get(b.toolchain, 3)


@plan_for()
def test_sframe_section_and_version(corpus, key):
    b = corpus.get(*key)
    tc = b.tc
    paths = [b.path, b.noeh] + ([b.lib, b.noeh_lib] if b.lib else [])
    for p in paths:
        data, endian, _ = tcs.sframe_section(p)
        assert endian == tc.endian, p
        assert int.from_bytes(data[0:2], endian) == tcs.SFRAME_MAGIC, p
        assert data[2] == b.version, f"{p}: SFrame version {data[2]}, expected {b.version}"
        assert data[4] == tc.abi_arch, p
    # The copies without .eh_frame keep .sframe byte for byte, and nothing else unwinds.
    for full, stripped in [(b.path, b.noeh)] + ([(b.lib, b.noeh_lib)] if b.lib else []):
        names = section_names(stripped)
        assert not names & {".eh_frame", ".eh_frame_hdr", ".debug_frame"}, stripped
        assert ".eh_frame" in section_names(full)
        assert tcs.sframe_section(stripped)[0] == tcs.sframe_section(full)[0]


@plan_for()
def test_program_runs(corpus, key):
    b = corpus.get(*key)
    for noeh in (False, True):
        p = b.run(noeh=noeh, cwd=b.path.parent, timeout=120)
        assert p.returncode == 0, (noeh, p.stdout, p.stderr)
        for line in EXPECTED_OUTPUT[b.fixture]:
            assert line in p.stdout.splitlines(), (noeh, p.stdout)


@plan_for()
def test_fixture_functions_have_fdes(corpus, key):
    b = corpus.get(*key)
    fx = tcs.FIXTURES[b.fixture]
    targets = [(b.path, fx.functions)]
    if b.lib:
        targets.append((b.lib, tcs.LIBRARY_FUNCTIONS[fx.library]))
    for path, names in targets:
        syms = symbols(path)
        for name in names:
            assert name in syms, f"{path}: no symbol {name}"
            fde = fde_of(path, name)
            if name == "realigned_drap" and b.arch == "x86_64" and b.version < 3:
                # binutils 2.40/2.44 cannot express a DRAP CFA and leave the
                # function out of .sframe (only V3 has flex FDEs for it).
                assert fde is None, f"{path}: expected no FDE for {name}"
                continue
            assert fde is not None, f"{path}: no SFrame FDE for {name}"
            assert fde["size"] == syms[name][1], name
            assert fde["fres"] and fde["fres"][0]["start"] == 0, name


@plan_for()
def test_readelf_agrees_with_small_decoder(corpus, key):
    b = corpus.get(*key)
    for path in [b.path] + ([b.lib] if b.lib else []):
        text = readelf(path, b.version)
        ver, _flags, fdes = decoded(path)
        assert text.version == ver == b.version
        assert text.num_fdes == len(text.fdes) == len(fdes)
        for r, d in zip(text.fdes, fdes):
            assert (r.pc, r.size, r.mask) == (d["pc"], d["size"], bool(d["mask"]))
            assert len(r.rows) == len(d["fres"])
            assert r.attr == ("S" if d["signal"] else "") + ("F" if d["fde_type"] == 1 else "")


def test_readelf_versions(corpus):
    """Which readelf prints which version (the tests above rely on it)."""
    host = corpus.get("host", "frames", "O2-nofp").path
    assert "SFRAME_VERSION_1" in tcs.readelf_sframe(host, "host")
    assert "SFrame decode failure" in tcs.readelf_sframe(host, "sid", check=False)
    trixie = corpus.get("trixie", "frames", "O2-nofp").path
    assert "SFRAME_VERSION_2" in tcs.readelf_sframe(trixie, "sid")
    assert "SFRAME_VERSION_2" in tcs.readelf_sframe(trixie, "trixie")


# --------------------------------------------------------------------------
# Shapes


@plan_for(fixture="frames", variant="O2-nofp")
def test_leaf_and_non_leaf(corpus, key):
    b = corpus.get(*key)
    for leaf in ("stop_here", "leaf_work"):
        fde = readelf_fde_of(b, leaf)
        assert len(fde.rows) == 1 and fde.rows[0][1] == ENTRY_CFA[b.arch], fde
        assert fde.rows[0][2] == "u", fde  # FP untouched
    for name in ("level1", "level2", "level3"):
        fde = readelf_fde_of(b, name)
        assert len(fde.rows) >= 3, fde
        assert fde.rows[0][1] == ENTRY_CFA[b.arch]
        assert any(r[1] != ENTRY_CFA[b.arch] for r in fde.rows), fde
        assert all(r[1].startswith("sp+") for r in fde.rows), fde


@pytest.mark.parametrize("variant", ["O0-fp", "O2-fp", "O2-nofp"])
@pytest.mark.parametrize("toolchain", X86 + ["sid-s390x"])
def test_frame_pointer_variants(corpus, toolchain, variant):
    """With -fno-omit-frame-pointer the CFA moves to FP in non-leaf
    functions (x86-64, s390x; AArch64's GCC keeps an SP-based CFA)."""
    b = corpus.get(toolchain, "frames", variant)
    for name in ("level2", "level3"):
        fde = readelf_fde_of(b, name)
        has_fp = any(r[1].startswith("fp+") for r in fde.rows)
        assert has_fp == (variant != "O2-nofp"), fde


@plan_for(fixture="alloca")
def test_alloca_and_vla_use_fp_based_cfa(corpus, key):
    b = corpus.get(*key)
    for name in ("use_alloca", "use_vla"):
        fde = readelf_fde_of(b, name)
        assert any(r[1].startswith("fp+") for r in fde.rows), fde
        assert any(f["base"] == 0 and f["n"] for f in fde_of(b.path, name)["fres"])


@plan_for(fixture="realign", toolchain=X86)
def test_x86_stack_realignment(corpus, key):
    b = corpus.get(*key)
    fde = readelf_fde_of(b, "realigned")
    assert any(r[1] == "fp+16" for r in fde.rows), fde
    if b.version == 3:
        # DRAP: CFA first from r10, then through memory at FP-N: a flex FDE.
        fde = readelf_fde_of(b, "realigned_drap")
        assert fde.attr == "F", fde
        assert any(r[1] == "r10+0" for r in fde.rows), fde
        assert any(re.fullmatch(r"\(fp-\d+\)", r[1]) for r in fde.rows), fde
        assert fde_of(b.path, "realigned_drap")["fde_type"] == 1


@pytest.mark.parametrize("variant", ["O0-fp", "O2-fp"])
def test_s390x_flex_fde_for_fp_in_register(corpus, variant):
    """s390x leaf functions keep FP in a floating-point register (r16 = f0):
    V3 writes a flex FDE for that."""
    b = corpus.get("sid-s390x", "frames", variant)
    fde = readelf_fde_of(b, "stop_here")
    assert fde.attr == "F", fde
    assert any(r[2] and re.fullmatch(r"r\d+\+0", r[2]) for r in fde.rows), fde


@plan_for(fixture="bigframe", variant="O2-nofp")
def test_big_frames_need_wide_data_words(corpus, key):
    b = corpus.get(*key)
    mid, huge = fde_of(b.path, "mid_frame"), fde_of(b.path, "huge_frame")
    assert max(f["wsz"] for f in mid["fres"]) == 2, mid
    assert max(f["wsz"] for f in huge["fres"]) == 4, huge
    big = re.compile(r"sp\+(\d+)")
    offs = [int(m.group(1)) for r in readelf_fde_of(b, "huge_frame").rows
            if (m := big.fullmatch(r[1]))]
    assert max(offs) >= 300000
    offs = [int(m.group(1)) for r in readelf_fde_of(b, "mid_frame").rows
            if (m := big.fullmatch(r[1]))]
    assert 2000 <= max(offs) < 32768


@plan_for(fixture="bigfunc")
def test_big_function_needs_4_byte_fre_starts(corpus, key):
    b = corpus.get(*key)
    fde = fde_of(b.path, "big_function")
    assert fde["size"] > 0x10000
    assert fde["fre_type"] == 2  # SFRAME_FRE_TYPE_ADDR4
    assert max(f["start"] for f in fde["fres"]) >= 0x10000
    assert fde_of(b.path, "stop_here")["fre_type"] == 0
    text = readelf_fde_of(b, "big_function")
    assert max(r[0] for r in text.rows) - text.pc >= 0x10000


@plan_for(fixture="frames", toolchain=X86)
def test_plt_has_mask_fde(corpus, key):
    """.plt: PLT0 gets an ordinary FDE, the 16-byte entries after it one
    MASK FDE (FREs chosen by pc % 16) reaching to the end of the section."""
    b = corpus.get(*key)
    plt, size = section_range(b.path, ".plt")
    fdes = decoded(b.path)[2]
    plt0 = [f for f in fdes if f["pc"] == plt]
    assert len(plt0) == 1 and not plt0[0]["mask"] and plt0[0]["size"] == 16
    masks = [f for f in fdes if f["mask"] and f["pc"] == plt + 16]
    assert len(masks) == 1 and masks[0]["pc"] + masks[0]["size"] == plt + size, masks
    if b.version >= 2:
        assert masks[0]["rep_size"] == 16
    text = readelf(b.path, b.version)
    assert text.at(plt + 16).mask and not text.at(plt).mask


@pytest.mark.parametrize("variant", ["O2-pac", "O2-pacb"])
def test_aarch64_return_address_signing(corpus, variant):
    b = corpus.get("sid-aarch64", "frames", variant)
    for name in ("level1", "level2", "level3"):
        fde = readelf_fde_of(b, name)
        assert any(r[3] and r[3].endswith("[s]") for r in fde.rows), fde
        assert fde.pauth == ("B" if variant == "O2-pacb" else None), fde
        assert any(f["mangled"] for f in fde_of(b.path, name)["fres"])
        assert fde_of(b.path, name)["pauth_key"] == (variant == "O2-pacb")
    plain = corpus.get("sid-aarch64", "frames", "O2-nofp")
    assert not any(f["mangled"] for d in decoded(plain.path)[2] for f in d["fres"])


@plan_for(fixture="dlopen")
def test_shared_library_has_own_sframe(corpus, key):
    b = corpus.get(*key)
    for name in tcs.LIBRARY_FUNCTIONS["libfix"]:
        assert fde_of(b.lib, name) is not None
    assert "libfix.so" not in tcs.run_in("host", ["readelf", "-d", str(b.path)]).stdout


def test_strip_eh_helper(corpus, tmp_path):
    for t in tcs.TOOLCHAINS:
        b = corpus.get(t, "recurse", "O2-nofp")
        out = tcs.strip_eh(t, b.path, tmp_path / f"recurse-{t}")
        assert ".eh_frame" not in section_names(out)
        p = tcs.run_program(t, out, ["30"], cwd=tmp_path)
        assert p.returncode == 0 and "recurse: 30 60" in p.stdout, (t, p.stdout, p.stderr)


def test_build_api(roots, tmp_path):
    """build() with explicit flags, and build_library()."""
    exe = tcs.build("sid-aarch64", "frames", tmp_path / "a", cflags=["-O1"])
    assert tcs.sframe_version(exe) == 3
    assert tcs.run_program("sid-aarch64", exe).returncode == 0
    lib = tcs.build_library("trixie", "libfix", tmp_path / "b", cflags=["-O2"])
    assert lib.name == "libfix.so" and tcs.sframe_version(lib) == 2
