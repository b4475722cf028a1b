"""Running the `sframe` command as the tests do: as a user would (a fresh process, scripts/sframe,
no standard input), or in this process for the many look-ups a comparison makes."""

import contextlib
import io
import json
import subprocess
import sys
from typing import NamedTuple

from . import toolchains as T
from .toolchains import REPO

CLI = REPO / "scripts" / "sframe"


class Ran(NamedTuple):
    """What a run printed: unpacks as (code, out, err), reads as a CompletedProcess."""
    returncode: int
    stdout: str
    stderr: str


def sframe(*args, timeout=600) -> Ran:
    """Run the CLI in a fresh process (the checkout's scripts/sframe, this Python)."""
    p = subprocess.run([sys.executable, str(CLI), *map(str, args)], cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=timeout)
    return Ran(p.returncode, p.stdout, p.stderr)


def lookup_lines(path, addr):
    """`sframe lookup --registers PATH ADDR` run in this process: (exit status, lines, stderr);
    `addr` an int or any text the command takes."""
    from sframekit.core.cli import main as cli
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["lookup", "--registers", str(path), addr if isinstance(addr, str) else "%#x" % addr])
    return rc, out.getvalue().splitlines(), err.getvalue()


# (toolchain, kind, function, what, sframe, cfi) -> reason.  test_known_behaviours_against_readelf
# checks the CFI side of them.
PLT_GOT_16 = "binutils 2.44 and 2.47's ld write .plt.got as sp+16; its CFI (and the code: one jmp) say sp+8"
NO_DRAP_FDE = "gas before 2.46 writes no FDE for a function that realigns its stack through a DRAP register"
KNOWN = {
    ("*", "CFI without FDE", "_start", "", "", ""):
        "the C runtime's crt1.o is assembled without --gsframe: CFI, no SFrame",
    ("host", "CFI without FDE", ".plt.got", "", "", ""): "binutils 2.40's ld writes no SFrame FDE for .plt.got",
    ("sid", "not comparable", "realigned_drap", "FP", "", ""):
        "the CFI saves rbp by DW_CFA_expression (DRAP); SFrame's flex FDE says it in its own words",
    ("sid-s390x", "CFI without FDE", ".plt", "", "", ""): "binutils' s390x ld writes no SFrame FDE for the PLT",
}
for _tc in ("trixie", "sid"):
    KNOWN[(_tc, "disagree", ".plt.got", "CFA", "rsp + 16", "rsp + 8")] = PLT_GOT_16
for _tc in ("host", "trixie"):
    KNOWN[(_tc, "CFI without FDE", "realigned_drap", "", "", "")] = NO_DRAP_FDE
for _name in ("deregister_tm_clones", "register_tm_clones", "__do_global_dtors_aux", "frame_dummy"):
    KNOWN[("sid-aarch64", "CFI without FDE", _name, "", "", "")] = \
        "GCC's crtbegin.o (compiled without --gsframe) has CFI for its functions on AArch64 (none on x86-64, s390x)"


def run_check(path, *args, inroot=None):
    """(exit status, stdout, stderr) of `sframe check`, in the sid root (its Python) if inroot."""
    if inroot:
        p = T.run_in("sid", ["python3", str(CLI), "check", str(path), *args], binds=[path.parent], timeout=600)
    else:
        p = subprocess.run([sys.executable, str(CLI), "check", str(path), *args], cwd=REPO, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    return p.returncode, p.stdout, p.stderr


def findings(path, inroot=False):
    code, out, err = run_check(path, "--json", inroot=inroot)
    assert code in (0, 1) and err == "", (path, code, err)
    doc = json.loads(out)
    assert doc["failed"] == (code == 1)
    return doc
