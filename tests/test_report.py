"""core/report/status.py: the module table GDB's `info sframe` and LLDB's `sframe info` print, the
unwinder's activity line and a side file's state, on synthetic sections (unit tests)."""

from sframekit.core.errors import NoSFrameError, SFrameError
from sframekit.core.report.status import SideFileState, SideFileStatus, activity_line, module_table
from sframekit.core.sframe import format as F
from sframekit.core.sframe.encode import Func, Row, build
from sframekit.core.unwind.modules import ModuleSet

TEXT = 0x401000


def _section(start=TEXT):
    data = build(2, F.ABI.AMD64_ENDIAN_LITTLE, [Func(start, 0x20, [Row(0, (8,))]), Func(start + 0x20, 0x10, [Row(0, (8,))])])
    return data, 0, ".sframe"


def _without():
    raise NoSFrameError("/lib/d.so: no .sframe section")


def _modules(bias=0x1000):
    def broken():
        raise SFrameError("a broken section")

    def gone():
        raise FileNotFoundError("the file is gone")
    ms = ModuleSet()
    ms.add("a", "/bin/a", bias=bias, loader=lambda: _section())
    ms.add("b", "/lib/b.so", bias=gone, loader=lambda: _section(0x7f0000))
    ms.add("c", "/lib/c.so", loader=broken)
    ms.add("d", "/lib/d.so", loader=_without)
    ms.find(TEXT)                            # (loads them)
    return ms


def test_the_table():
    lines = module_table(_modules(), "objfile")
    assert lines[0].split() == ["Objfile", "Version", "ABI", "FDEs", "FREs", "Text", "range", "Load", "bias"]
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert rows["/bin/a"][1:] == ["2", "AMD64", "little-endian", "2", "2", "0x401000-0x401030", "0x1000"], lines
    assert rows["/lib/b.so"][-1] == "?", lines        # its bias cannot be had: that row only says so
    assert lines[3] == "1 other objfile without SFrame.", lines
    assert lines[4] == "Objfiles whose SFrame section cannot be used:" and lines[5].startswith("  /lib/c.so: "), lines
    assert len(lines) == 6 and all(len(line) == len(line.rstrip()) for line in lines), lines


def test_no_module_with_sframe():
    ms = ModuleSet()
    ms.add("d", "/lib/d.so", loader=_without)
    ms.find(TEXT)
    assert module_table(ms, "module") == ["No loaded module has SFrame information (1 module tracked)."]
    assert module_table([], "objfile") == ["No loaded objfile has SFrame information (0 objfiles tracked)."]


def test_activity_and_side_files():
    assert activity_line(True, "mode always") == "SFrame unwinder: active (mode always)."
    assert activity_line(False, "set sframe off") == "SFrame unwinder: idle, costing nothing (set sframe off)."
    texts = {SideFileStatus(SideFileState.ATTACHED, "/c/x.debug"): "attached (/c/x.debug)",
             SideFileStatus(SideFileState.PENDING, "/c/x.debug", "no process"):
                 "attached, not checked yet: no process (/c/x.debug)",
             SideFileStatus(SideFileState.LATE, "/c/x.debug", "LLDB 19 planned first"):
                 "attached (/c/x.debug), but LLDB 19 planned first",
             SideFileStatus(SideFileState.NOT_ATTACHED, why="its CFI covers it"): "not attached: its CFI covers it"}
    for status, text in texts.items():
        assert status.text() == text
