"""The `sframe` command: dump, lookup and backtrace without a debugger."""

import argparse
import json
import os
import shutil
import sys
import time
from typing import List, Optional

from .. import __version__
from ..errors import ElfError, NoSFrameError, NotElfError, ProcessError, SFrameError
from . import options as O
from .options import UsageError

DEFAULT_FRAMES = 100000


def _image(path):
    from ..elf.image import ElfImage
    img = ElfImage(path)
    img.require_sframe()
    return img


def cmd_dump(args: argparse.Namespace) -> int:
    """One file: its section as readelf prints it (no SFrame: an error).  Several, or archives:
    as readelf prints them, `File: NAME` before each file and member (`lib.a(a.o)`, a thin
    archive's `thin.a[a.o]`); a file without SFrame a warning, one that is not ELF an error, and
    the others go on; exit status 1 where any failed."""
    from ..elf import archive
    from ..report.dump import dump_file
    if len(args.files) == 1 and not archive.is_archive(args.files[0]):
        sys.stdout.write(dump_file(args.files[0]))
        return 0
    status = 0

    def say(text: str) -> None:
        sys.stdout.flush()
        print("sframe: %s" % text, file=sys.stderr, flush=True)
    with archive.inputs(args.files) as items:
        for item in items:
            if item.path is None:
                say(item.error or item.display)
                status = 1
                continue
            if not item.member and not os.path.isfile(item.path):
                say("%s: %s" % (item.path, "no such file" if not os.path.exists(item.path) else "not a regular file"))
                status = 1                                 # (readelf prints no File: line for it either)
                continue
            try:
                text = dump_file(item.path)
            except NotElfError:
                say("%s: not an ELF file" % item.display)
                status = 1
                continue
            except NoSFrameError:
                sys.stdout.write("\nFile: %s\n" % item.display)
                say("warning: %s: no SFrame section (.sframe)" % item.display)
                continue
            except (ElfError, SFrameError) as exc:
                sys.stdout.write("\nFile: %s\n" % item.display)
                say(_named(str(exc), item))
                status = 1
                continue
            sys.stdout.write("\nFile: %s\n%s" % (item.display, text))
    return status


def _named(text: str, item) -> str:
    """An error's text with an archive member's temporary copy named as readelf names the member."""
    if item.member and item.path:
        text = text.replace(item.path, item.display)
    return text if text.startswith(item.display) else "%s: %s" % (item.display, text)


def cmd_lookup(args: argparse.Namespace) -> int:
    from ..elf.image import parse_address
    from ..report.lookup import lookup_report
    from ..unwind.modules import ModuleSet, NotCovered, locate
    img = _image(args.file)
    try:
        addr = parse_address(args.addr, img)
    except ValueError as exc:
        raise ElfError("%s: %s" % (args.file, exc)) from None
    modules = ModuleSet()
    sf = img.sframe
    modules.add(args.file, args.file, loader=lambda: (sf.data, sf.address, sf.name))
    try:
        module, match = locate(modules, addr, lambda _addr: args.file, "file")
    except NotCovered as exc:
        raise ElfError(str(exc)) from None
    lines = lookup_report(addr, module, match, img.symbolize(match.fde.start),
                          read_code=img.file_bytes if args.registers else None, symbolize=img.symbolize)
    where = img.placement(addr)
    if where:
        lines[0] += " (%s)" % where
    print("\n".join(lines))
    return 0


def cmd_backtrace(args: argparse.Namespace) -> int:
    from .backtrace import backtrace_core, backtrace_process
    if args.thread is not None and args.all_threads:
        raise UsageError("-t N picks one thread: not with -a")
    common = dict(all_threads=args.all_threads, thread=args.thread, out=sys.stdout, limit=args.count,
                  fp_fallback=args.fp_fallback, registers=args.registers, cfi=args.eh_frame, as_json=args.json)
    if args.pid is not None:
        if args.core is not None or args.exe or args.sysroot:
            raise UsageError("-p PID reads a running process: give no core file, --exe or --sysroot with it")
        return backtrace_process(args.pid, **common)
    if args.core is None:
        raise UsageError("give a core file, or -p PID for a running process")
    return backtrace_core(args.core, exe=args.exe, sysroot=args.sysroot, **common)


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0: every comparable rule agrees (with --registers: no wrong place); 1: a disagreement
    (a wrong place); 2: a usage or file error.  Several files, or archives: each one's report as
    for it alone (a file without SFrame: a warning), then one summary line; the worst status."""
    import json

    from ..elf import archive
    if len(args.files) == 1 and not archive.is_archive(args.files[0]):
        try:
            report = _check_report(args, args.files[0])
        except (ElfError, SFrameError, ImportError) as exc:
            print("sframe: %s" % exc, file=sys.stderr)
            return 2
        if args.json:
            json.dump(report.as_dict(), sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print("\n".join(_check_lines(args, report)))
        return _check_status(report)
    worst, counts, docs = 0, {"agree": 0, "disagree": 0, "without SFrame": 0, "failed": 0}, []
    with archive.inputs(args.files) as items:
        for item in items:
            sys.stdout.flush()
            try:
                if item.path is None:
                    raise ElfError(item.error or item.display)
                report = _check_report(args, item.path)
            except NoSFrameError:
                print("sframe: warning: %s: no SFrame section (.sframe)" % item.display, file=sys.stderr, flush=True)
                counts["without SFrame"] += 1
                docs.append({"file": item.display, "sframe": False})
                continue
            except (ElfError, SFrameError, ImportError) as exc:
                print("sframe: %s" % _named(str(exc), item), file=sys.stderr, flush=True)
                counts["failed"] += 1
                worst = 2
                docs.append({"file": item.display, "error": _named(str(exc), item)})
                continue
            status = _check_status(report)
            worst = max(worst, status)
            counts["disagree" if status else "agree"] += 1
            report.path = item.display          # (an archive member's temporary copy: named as readelf names it)
            if args.json:
                docs.append(report.as_dict())
            else:
                print("\n".join(_check_lines(args, report)))
    summary = "sframe check: %d file%s: %s" % (sum(counts.values()), "" if sum(counts.values()) == 1 else "s",
                                               ", ".join("%d %s" % (n, what) for what, n in counts.items()))
    if args.json:
        json.dump({"files": docs, "counts": counts}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(summary)
    return worst


def _check_report(args: argparse.Namespace, path: str):
    from ..checks import against_cfi, registers
    check = registers.check_registers if args.registers else against_cfi.check_file
    return check(path, function=args.function)


def _check_status(report) -> int:
    from ..checks import against_cfi, registers
    failed = report.wrong if isinstance(report, registers.RegisterReport) else against_cfi.failed(report)
    return 1 if failed else 0


def _check_lines(args: argparse.Namespace, report) -> List[str]:
    """A report's text: its wrong places or findings (at most --show), then its summary lines."""
    from ..checks import against_cfi, registers
    out: List[str] = []
    if isinstance(report, registers.RegisterReport):
        listed = report.wrong if args.show is None else report.wrong[:args.show]
        out += map(str, listed)
        if len(listed) < len(report.wrong):
            out.append("(more wrong places not shown: --show %d)" % args.show)
        return out + registers.summary_lines(report, top=args.top)
    shown = 0
    for f in report.findings:
        if args.show is not None and f.kind == against_cfi.DISAGREE and shown >= args.show:
            continue
        shown += f.kind == against_cfi.DISAGREE
        out.append(str(f))
    if args.show is not None and shown < sum(f.kind == against_cfi.DISAGREE for f in report.findings):
        out.append("(more disagreements not shown: --show %d)" % args.show)
    return out + against_cfi.summary_lines(report)


def cmd_cfi(args: argparse.Namespace) -> int:
    """Write the program's SFrame out as DWARF CFI in a side file (core.elf.sidefile); with
    --build-id-dir, of every program and library in files and trees (core.elf.sidetree)."""
    from ..elf import sidefile
    if (args.output is None) == (args.build_id_dir is None):
        raise UsageError("give -o OUT or --build-id-dir DIR (one of them)")
    single = len(args.files) == 1 and not os.path.isdir(args.files[0])
    if args.debug_file and not os.path.isfile(args.debug_file):
        raise ElfError("%s: no such file (--debug-file)" % args.debug_file)
    if args.output is None:
        if args.debug_file and not single:
            raise UsageError("--debug-file DBG goes with one program, not several")
        return _cfi_tree(args, single)
    if not single:
        raise UsageError("-o OUT takes one program; for several, or a tree, give --build-id-dir DIR")
    if args.json:
        raise UsageError("--json goes with --build-id-dir")
    program = args.files[0]
    from ..elf.debugfile import separate_debug_file
    debug = None if args.no_debug_file else args.debug_file or separate_debug_file(program)
    made = sidefile.write(program, args.output, callee_saved=args.registers, all_functions=args.all,
                          workers=args.jobs, debug_file=debug)
    print(_cfi_written(args.output, made.functions, made.fdes, made.skipped, debug, made.symtab_from_dynsym))
    if made.build_id is None:
        print("warning: %s has no build ID: no debugger finds this file by itself; load it with GDB's "
              "add-symbol-file or LLDB's target symbols add -s" % program, file=sys.stderr)
    return 0


def _cfi_written(out: str, functions: int, fdes: int, skipped: int, debug: Optional[str], dynsym: bool) -> str:
    return "%s: %d function%s with SFrame written as %d DWARF FDE%s%s%s%s" % (
        out, functions, "" if functions == 1 else "s", fdes, "" if fdes == 1 else "s",
        "; %d left to the program's own CFI" % skipped if skipped else "",
        "; with the debug information of %s" % debug if debug else "",
        "; the program has no .symtab: its symbols are its .dynsym and one per function" if dynsym else "")


class _Progress:
    """A progress line on standard error, only where it is a terminal: rewritten in place at most
    ten times a second (the last always), the path cut from the left to fit; `end` erases it."""

    def __init__(self, wanted: bool = True):
        self.on = wanted and sys.stderr.isatty()
        self.width = shutil.get_terminal_size().columns - 1
        self.shown = 0.0

    def show(self, head: str, path: str, more: bool) -> None:
        now = time.monotonic()
        if not self.on or more and now - self.shown < 0.1:
            return
        self.shown = now
        room = max(self.width - len(head), 10)
        print("\r\033[K" + head + (path if len(path) <= room else "..." + path[-room + 3:]), end="",
              file=sys.stderr, flush=True)

    def end(self) -> None:
        if self.on:
            print("\r\033[K", end="", file=sys.stderr, flush=True)


def _cfi_tree(args: argparse.Namespace, single: bool) -> int:
    """`sframe cfi PATH... --build-id-dir DIR`: one line per file that failed (stderr), then one
    summary line (or, for one program, what became of it; or --json: everything)."""
    from ..elf import sidetree
    from ..parallel import workers
    bar = _Progress(not single)

    def progress(stage: str, done: int, total: int, path: str) -> None:
        bar.show("sframe cfi: %d/%d %s  " % (done, total, stage), path, done < total)
    summary = sidetree.run(args.files, args.build_id_dir, all_functions=args.all, registers=args.registers,
                           processes=args.jobs or workers(1 << 20, 1), debug_file=args.debug_file,
                           find_debug_file=not args.no_debug_file, progress=progress if bar.on else None)
    bar.end()
    if args.json:
        print(json.dumps(summary.json(), indent=1))
        return 1 if summary.failed else 0
    if single and len(summary.results) == 1:
        r = summary.results[0]
        Out = sidetree.Outcome
        if r.outcome in (Out.FAILED, Out.LEFT_ALONE):
            raise ElfError("%s: %s" % (r.path, r.why))
        if r.outcome is Out.NO_SFRAME:
            raise NoSFrameError("%s: it has no SFrame section" % r.path)
        if r.outcome is Out.NOT_NEEDED:
            print("%s: no side file needed: %s" % (r.path, r.why))
        elif r.outcome is Out.UP_TO_DATE:
            print("%s: up to date (%d function%s with SFrame written as %d DWARF FDE%s)" % (
                r.entry, r.functions, "" if r.functions == 1 else "s", r.fdes, "" if r.fdes == 1 else "s"))
        else:
            print(_cfi_written(r.entry or "", r.functions, r.fdes, r.skipped, r.debug_file, r.dynsym))
        return 0
    for r in summary.results:
        if r.outcome in (sidetree.Outcome.FAILED, sidetree.Outcome.LEFT_ALONE):
            print("%s: %s" % (r.path, r.why), file=sys.stderr)
    print(summary.line())
    return 1 if summary.failed else 0


def cmd_stats(args: argparse.Namespace) -> int:
    """The figures of every file, archive member and tree given (core.checks.stats); exit 1
    where an input could not be read."""
    from ..checks import stats
    from ..parallel import workers
    bar = _Progress()

    def progress(done: int, total: int, path: str) -> None:
        bar.show("sframe stats: %d/%d  " % (done, total), path, done < total)
    summary = stats.run(args.paths, processes=args.jobs or workers(1 << 20, 1), progress=progress if bar.on else None)
    bar.end()
    for p in summary.problems:
        if not p.no_sframe:
            print("sframe: %s: %s" % (p.name, p.why), file=sys.stderr)
    if args.json:
        print(json.dumps(summary.json(), indent=1))
    else:
        print("\n".join(stats.lines(summary, functions=args.functions)))
    return 1 if summary.failed else 0


def package_dir() -> str:
    """The directory imported as the package `sframekit`: the checkout, or the installed copy."""
    core = sys.modules[__name__.rsplit(".", 2)[0]]      # sframekit.core, whose folder is in it
    return os.path.dirname(os.path.dirname(os.path.abspath(core.__file__ or "")))


def cmd_gdbinit(args: argparse.Namespace) -> int:
    print("source %s" % os.path.join(package_dir(), "sframe_gdb", "load.py"))
    return 0


def cmd_lldbinit(args: argparse.Namespace) -> int:
    print("command script import %s" % os.path.join(package_dir(), "lldb_plugin"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sframe", description="Read SFrame stack-trace sections (.sframe) without a debugger.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)   # --version unwrapped
    p.add_argument("--version", action="version", version="sframe-gdb %s (%s)" % (__version__, package_dir()))
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="print the SFrame section like binutils 2.47's readelf --sframe")
    d.add_argument("files", nargs="+", metavar="FILE", help="ELF files and archives (thin ones too)")
    d.set_defaults(func=cmd_dump)
    lk = sub.add_parser("lookup", help="show the FDE, FRE and recovery rules covering an address")
    lk.add_argument("file")
    lk.add_argument("addr", help="hex (0x...), decimal, or symbol[+offset]")
    O.add_registers(lk, "also where the callee-saved registers are (from the function's code)")
    lk.set_defaults(func=cmd_lookup)
    bt = sub.add_parser("backtrace", aliases=["bt"], help="unwind the threads of an ELF core file or of a running "
                        "process with SFrame",
                        description="Unwind the threads of an ELF core file, or of a running process (-p: its "
                        "threads are stopped with ptrace while they are read, then go on), with SFrame; where no "
                        "SFrame covers a PC, with the module's DWARF CFI (.eh_frame, .debug_frame) unless "
                        "--no-eh-frame.")
    bt.add_argument("core", nargs="?", help="the core file (not with -p)")
    bt.add_argument("-p", "--pid", type=int, help="a running process instead of a core file")
    bt.add_argument("--exe", help="the executable, if the core's file list does not lead to it")
    bt.add_argument("--sysroot", help="prefix for the paths of mapped files")
    O.add_threads(bt, "as the backtrace numbers them; default: the first")
    O.add_fp_fallback(bt)
    O.add_count(bt, default=DEFAULT_FRAMES, what="frames per thread", old=("--max", "--limit"))
    O.add_eh_frame(bt)
    O.add_json(bt)
    O.add_registers(bt, "print each frame's callee-saved registers (callers: those the function's code proves)")
    bt.set_defaults(func=cmd_backtrace)
    ck = sub.add_parser("check", help="compare the SFrame section with the file's DWARF CFI at every address",
                        description="Compare what the SFrame section and the DWARF CFI (.eh_frame, .debug_frame) "
                        "of the same file say at every address of every function: CFA, return address, frame "
                        "pointer; and which functions each covers.  Exit status: 0 when everything comparable "
                        "agrees, 1 on a disagreement, 2 on a usage or file error.")
    ck.add_argument("files", nargs="+", metavar="FILE", help="ELF files and archives (thin ones too)")
    O.add_json(ck)
    ck.add_argument("--function", metavar="NAME", help="only this function (as the findings name it)")
    ck.add_argument("--show", dest="show", type=O.not_negative, metavar="N",
                    help="print at most N disagreements (all are counted)")
    ck.add_argument("--max", dest="show", type=O.not_negative, help=argparse.SUPPRESS)    # (the old spelling)
    O.add_registers(ck, "grade the callee-saved registers the function's code proves (what the unwinders show) "
                    "against the CFI at every instruction: proved, unknown (with why), wrong; exit 1 on a wrong one")
    ck.add_argument("--top", type=int, default=10, metavar="N",
                    help="with --registers: list the N functions with most unknown places (default 10)")
    ck.set_defaults(func=cmd_check)
    cf = sub.add_parser("cfi", help="write the SFrame section out as DWARF CFI (.debug_frame) in a side file",
                        description="Write a separate debug file holding the program's SFrame as DWARF call-frame "
                        "information (.debug_frame), with the callee-saved registers the function's code proves "
                        "(the others undefined), the program's build ID and its section layout: GDB, LLDB and "
                        "eu-stack then unwind with it where the program has no CFI of its own.  Functions the "
                        "program's own CFI covers are left out unless --all.  "
                        "The program's own separate debug file (by build ID under /usr/lib/debug, or by "
                        ".gnu_debuglink) is carried in it: the debuggers take the side file in its place.",
                        epilog="Use it:  gdb -iex 'set debug-file-directory DIR:/usr/lib/debug' PROG   |   lldb: target "
                        "symbols add OUT   |   eu-stack --debuginfo-path=DIR:/usr/lib/debug ...  (DIR as given to "
                        "--build-id-dir)")
    cf.add_argument("files", nargs="+", metavar="PATH",
                    help="the program (with -o), or programs, libraries and directories (with --build-id-dir)")
    cf.add_argument("-o", "--output", metavar="OUT", help="the side file to write")
    cf.add_argument("--build-id-dir", metavar="DIR",
                    help="write DIR/.build-id/xx/rest.debug instead, where debuggers and debuginfod look for it: "
                    "for each program and shared library with SFrame in the files and directories given "
                    "(walked), once per build; an entry up to date is left alone")
    cf.add_argument("--all", action="store_true", help="also the functions the program's own CFI covers")
    cf.add_argument("--registers", action=argparse.BooleanOptionalAction, default=True,
                    help="the callee-saved registers the function's code proves (default: on; off: all undefined)")
    cf.add_argument("-j", "--jobs", type=O.positive, metavar="N",
                    help="analyse the functions (several programs: the programs) in at most N processes "
                    "(default: one per core this process may use)")
    O.add_json(cf)
    dbg = cf.add_mutually_exclusive_group()
    dbg.add_argument("--debug-file", metavar="DBG",
                     help="the program's separate debug file, whose debug information the side file carries "
                     "(default: the one found by build ID under /usr/lib/debug or by .gnu_debuglink)")
    dbg.add_argument("--no-debug-file", action="store_true", help="carry no separate debug file's contents")
    cf.set_defaults(func=cmd_cfi, elftools=False)
    st = sub.add_parser("stats", help="the size, make-up and coverage of SFrame in files, archives and trees",
                        description="For each ELF file and archive member under the paths (directories walked): "
                        "the SFrame section's version, ABI and counts, its bytes against .eh_frame, .eh_frame_hdr "
                        "and .debug_frame, where its bytes go, how much code it covers against the CFI and each "
                        "function with CFI but no SFrame FDE (with the reason where it can be told), and its rows "
                        "laid out again as V2 and V3; then the totals, and each input whose version or ABI "
                        "differs from most.  Exit status 1 where an input cannot be read.")
    st.add_argument("paths", nargs="+", metavar="PATH", help="ELF files, archives, directories")
    st.add_argument("--functions", action="store_true", help="list each function with CFI but no SFrame FDE")
    st.add_argument("-j", "--jobs", type=O.positive, metavar="N",
                    help="look at the files in at most N processes (default: one per core)")
    O.add_json(st)
    st.set_defaults(func=cmd_stats)
    gi = sub.add_parser("gdbinit", help="print the line that loads this copy into GDB (for ~/.gdbinit)")
    gi.set_defaults(func=cmd_gdbinit)
    li = sub.add_parser("lldbinit", help="print the line that loads this copy into LLDB (for ~/.lldbinit)")
    li.set_defaults(func=cmd_lldbinit)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "elftools", True):
            # (pyelftools missing: one line now, not a fallback quietly lost later; `cfi` never
            # uses it, and does without its import)
            from .. import pyelftools
            pyelftools.load()
        return args.func(args)
    except (ElfError, SFrameError, ImportError, ProcessError) as exc:   # ImportError: pyelftools missing
        print("sframe: %s" % exc, file=sys.stderr)
        return 1
    except UsageError as exc:
        print("sframe: %s" % exc, file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
