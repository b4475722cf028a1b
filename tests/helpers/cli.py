"""Running the `sframe` command as the tests do: as a user would (a fresh process, scripts/sframe,
no standard input), or in this process for the many look-ups a comparison makes."""

import contextlib
import io
import subprocess
import sys
from typing import NamedTuple

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
