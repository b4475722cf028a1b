"""Planted faults, to show that the tests catch the regressions they are meant to (issue 31).

    /usr/bin/python3 tests/helpers/mutants.py list
    /usr/bin/python3 tests/helpers/mutants.py run NAME [--tests-from REV]

`run` copies the committed checkout (HEAD) into a temporary work tree, plants the fault (one
textual change in the code under test), and runs the tests that guard against it there: they must
fail.  With --tests-from REV the tests come from another revision (the tests before they were
strengthened), which let the same fault through.  Prints PASS (the fault went unseen) or FAIL
(caught), and exits 0 either way; the note on the issue lists what each run printed.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

# name: (file, text in it, its replacement, tests that must catch it, what the fault is); and in
# OLD_TESTS, where the tests that let it through before had other names.
MUTANTS = {
    "plugin-error": (
        "sframe_gdb/unwinder.py",
        "    def __call__(self, pf):\n        try:\n",
        "    def __call__(self, pf):\n        try:\n            if pf.level() == 1:\n"
        "                raise RuntimeError(\"planted fault\")\n",
        ["tests/test_gdb.py::test_verify_native[gdb13-host]"],
        "the GDB unwinder raises at every frame #1 (it then declines, and DWARF takes the frame)"),
    "registers-compared-equal": (
        "core/checks/against_debugger.py",
        "            elif got == want:\n",
        "            elif got == want or True:\n",
        ["tests/test_gdb.py::test_verify_reports_a_wrong_callee_saved_register"],
        "sframe verify counts a callee-saved register of a different value as equal"),
    "saved-at-the-push": (
        "core/saves/x86.py",
        "        if d is not None and d <= k_pc:\n",
        "        if d is not None and d <= k_pc + 8:\n",
        ["tests/test_saves.py::test_agrees_with_dwarf_cfi[host]"],
        "x86-64: a register is 'saved' from the push instruction itself, before the push has run"),
    "restored-at-the-pop": (
        "core/saves/x86.py",
        "        if d is not None and d <= k_pc:\n",
        "        if d is not None and (d < k_pc or d == k_pc and pc < self.straight_until):\n",
        ["tests/test_saves.py::test_agrees_with_dwarf_cfi[host]"],
        "x86-64: past the way in, the innermost pushed register is 'unchanged' while SP is at its slot "
        "(at its pop, before the pop has run)"),
    "one-instruction-late": (
        "core/saves/flow_analyser.py",
        "        k = bisect.bisect_right(self.starts, pc) - 1\n",
        "        k = bisect.bisect_right(self.starts, pc)\n",
        ["tests/test_saves.py::test_agrees_with_dwarf_cfi[sid-aarch64]"],
        "AArch64/s390x: each instruction gets the state after it (saved at the store, restored at the load)"),
    "fp-slot-off-by-8": (
        "core/saves/x86.py",
        "            return Save(SaveKind.SAVED, run[0], base=self.abi.fp)\n",
        "            return Save(SaveKind.SAVED, run[0] - 8, base=self.abi.fp)\n",
        ["tests/test_saves.py::test_agrees_with_dwarf_cfi[sid]"],
        "x86-64: a frame-pointer-relative save slot (DRAP frames) is placed 8 bytes too low"),
    "leaf-work-not-analysed": (
        "core/saves/analysis.py",
        "    if sym is not None:\n        name, offset = sym\n",
        "    if sym is not None:\n        name, offset = sym\n        if name == \"leaf_work\":\n"
        "            return \"planted fault\"\n",
        ["tests/test_saves.py::test_agrees_with_dwarf_cfi[host]"],
        "the analysis refuses one fixture function (leaf_work): a few hundred unknown places, under 0.5%"),
    "level2-not-analysed": (
        "core/saves/analysis.py",
        "    if sym is not None:\n        name, offset = sym\n",
        "    if sym is not None:\n        name, offset = sym\n        if name == \"level2\":\n"
        "            return \"planted fault\"\n",
        ["tests/test_backtrace.py::test_callee_saved_registers"],
        "the analysis refuses one fixture function (level2): a few callee-saved registers of cores' outer "
        "frames not recovered, under 0.1%"),
    "no-cfi-fallback": (
        "core/target/session.py",
        "        \"\"\"The DWARF CFI rules at pc, from the file mapped there (for PCs no SFrame covers).\"\"\"\n",
        "        \"\"\"The DWARF CFI rules at pc, from the file mapped there (for PCs no SFrame covers).\"\"\"\n"
        "        return None\n",
        ["tests/test_backtrace.py::test_deep_recursion[host]"],
        "sframe backtrace CORE no longer finds the C library's CFI (every stack ends at libc)"),
    "plugin-warns": (
        "sframe_gdb/unwinder.py",
        "    def __call__(self, pf):\n        try:\n",
        "    def __call__(self, pf):\n        if pf.level() == 0:\n"
        "            gdb.write(\"warning: sframe: planted warning\\n\", gdb.STDERR)\n        try:\n",
        ["tests/test_noharm.py::test_plugin_changes_nothing_where_cfi_exists[gdb13-host]"],
        "the plugin prints a warning (to GDB's standard error) at every unwind"),
    "lookup-misses-odd-fdes": (
        "core/sframe/index.py",
        "        fde = self.find_fde(pc)\n        if fde is None:\n            return None\n",
        "        fde = self.find_fde(pc)\n        if fde is None or fde.index % 2:\n            return None\n",
        ["tests/test_lldb.py::test_backtrace_matches_lldb_bt"],
        "the look-up finds no FDE for every second function"),
    "sframe-bt-stops-at-5": (
        "core/unwind/unwinder.py",
        "DEFAULT_DEPTH_LIMIT = ",
        "DEFAULT_DEPTH_LIMIT = 5 or ",
        ["tests/test_lldb_provider.py::test_lldb23_says_why_and_sframe_bt_works"],
        "LLDB's sframe bt stops after five frames"),
    "dump-refuses-mask": (
        "core/report/dump.py",
        "    sec = Section(section_data, section_addr)\n    h = sec.header\n",
        "    sec = Section(section_data, section_addr)\n    h = sec.header\n"
        "    if any(f.pc_type == 1 for f in sec.fdes()):\n"
        "        raise SFrameError(0, \"planted: readelf cannot print it\")\n",
        ["tests/test_dump.py::test_random_sections_match_sid_readelf"],
        "the dump refuses every section with a PLT (MASK) FDE, as if readelf could not print it"),
}


OLD_TESTS = {
    "registers-compared-equal": ["tests/test_gdb.py::test_verify_native[gdb13-host]"],
}


def _worktree(tests_from):
    d = Path(tempfile.mkdtemp(prefix="mutant-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(d / "wt"), "HEAD"], check=True)
    wt = d / "wt"
    if tests_from:
        subprocess.run(["git", "-C", str(wt), "checkout", "-q", tests_from, "--", "tests"], check=True)
    return d, wt


def run(name, tests_from=None):
    path, old, new, tests, what = MUTANTS[name]
    d, wt = _worktree(tests_from)
    try:
        target = wt / path
        text = target.read_text()
        if old not in text:
            raise SystemExit("%s: the text to change is not in %s" % (name, path))
        text = text.replace(old, new, 1)
        target.write_text(text)
        if tests_from:
            tests = OLD_TESTS.get(name, tests)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=wt,
                              capture_output=True, text=True)
        verdict = "FAIL (caught)" if proc.returncode else "PASS (let through)"
        print("%s, tests from %s: %s -- %s" % (name, tests_from or "HEAD", verdict, what))
        print("  " + (proc.stdout.strip().splitlines() or ["(no output)"])[-1])
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(wt)], check=False)
        shutil.rmtree(d, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("name", choices=sorted(MUTANTS))
    r.add_argument("--tests-from", metavar="REV")
    args = p.parse_args()
    if args.cmd == "list":
        for name, (path, _o, _n, tests, what) in sorted(MUTANTS.items()):
            print("%-26s %s\n%26s (%s; caught by %s)" % (name, what, "", path, ", ".join(tests)))
        return
    os.environ.pop("PYTEST_ADDOPTS", None)
    run(args.name, args.tests_from)


if __name__ == "__main__":
    main()
