"""Which objfiles are loaded, where, and their SFrame indexes (a core ModuleSet per program space).

GDB tells us about objfiles through events; this module keeps the list (cheaply: no file is read
then) and builds the core ModuleSet from it on first use.  GDB has no Python API for an objfile's
load bias, so the bias comes from `maint info sections -all-objects` (the runtime address of each
objfile's .sframe), and the section's bytes are read through GDB's memory view (GDB has parsed the
ELF file already; the file is read only if that fails).  The same text says where each objfile's
DWARF CFI is (.eh_frame_hdr and .eh_frame, read through memory too; .debug_frame, which is not
loaded, from the file or its separate debug file), for mode auto.  That text is read at most once per change:
objfile events, a new run, attach or core file mark everything stale, and the next lookup re-reads
it and rebuilds only the indexes whose bias moved.
"""

import os
import re
from typing import NamedTuple

import gdb

from ..core.target import remotecopy

_HEADER_RE = re.compile(r"^(?:Exec file|Object file|Core file): `(.*)', file type")
_SECTION_RE = re.compile(r"^\s*\[\s*\d+\]\s+(0x[0-9a-fA-F]+)->(0x[0-9a-fA-F]+) at 0x[0-9a-fA-F]+: (\S+)(.*)$")
SFRAME, EH_FRAME, EH_FRAME_HDR, DEBUG_FRAME = ".sframe", ".eh_frame", ".eh_frame_hdr", ".debug_frame"
_WANTED = (SFRAME, EH_FRAME, EH_FRAME_HDR, DEBUG_FRAME)


class Placed(NamedTuple):
    """Where GDB has a section: its runtime start and end, and whether GDB relocates it (it has
    relocations: the objfile is a relocatable file)."""
    start: int
    end: int
    reloc: bool = False


def parse_sections(text, names=_WANTED):
    """{objfile name: {section name: Placed}} from `maint info sections` text, for the sections
    in `names` that have contents in the file (not a separate debug file's NOBITS copies)."""
    out = {}
    current = None
    for line in text.splitlines():
        m = _HEADER_RE.match(line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        m = _SECTION_RE.match(line)
        if m and current is not None and m.group(3) in names and m.group(3) not in current \
                and "HAS_CONTENTS" in m.group(4).split():
            flags = m.group(4).split()
            current[m.group(3)] = Placed(int(m.group(1), 16), int(m.group(2), 16), "RELOC" in flags)
    return out


def local_path(objfile):
    """The file to read an objfile's SFrame from, or None (vDSO, in-memory or missing files).  A
    remote target's file (GDB's `target:` names) is its own name: read through GDB (see _fetch)."""
    name = objfile.filename
    if not name or name.startswith("system-supplied DSO") or name.startswith("<"):
        return None
    if remotecopy.remote_name(name) is not None:
        return name
    return name if os.path.isfile(name) else None


class _Walk(NamedTuple):
    """What core.target.inmemory found in the inferior's memory at one refresh, and how it read it."""
    generation: int
    read: object
    auxv: dict
    order: str
    found: list


class Tracker:
    """The objfiles of each program space, and the ModuleSets built from them.

    `on_change(maybe)` is called with True when something changed that may bring SFrame (so the
    unwinder must look again), and with False once it is known that nothing loaded has SFrame."""

    def __init__(self, log, on_change=None):
        self.log = log
        self.on_change = on_change or (lambda maybe: None)
        self._files = {}           # gdb.Progspace -> {gdb.Objfile: (path, GDB's name for it)}
        self._debug_files = {}     # GDB's name of an objfile -> {its separate debug files' GDB names: path}
        self._sets = {}            # gdb.Progspace -> ModuleSet
        self._added = {}           # gdb.Progspace -> set of objfiles added to its ModuleSet
        self._stale = True         # objfiles or load biases may have changed
        self._sections = None      # cached parse_sections() of the current program space
        self._current_ps = None
        self._current = None       # ModuleSet of _current_ps if anything in it has SFrame
        self._in_memory = {}       # gdb.Progspace -> {key: module} of modules found in a remote target's memory
        self._chains = {}          # gdb.Progspace -> the link_map chain (inmemory.link_chain) when they were found
        self._walk = None          # _Walk: the target's memory walked at the current generation
        self.generation = 0        # counts refreshes: what was learnt from the indexes before may be stale

    # -- objfiles -------------------------------------------------------------------------

    def add(self, objfile):
        """Track an objfile (separate debug files stand for their owner, which is tracked)."""
        try:
            if not objfile.is_valid():
                return
            if objfile.owner is not None:      # its .debug_frame is CFI GDB uses for the owner's code
                path = local_path(objfile)
                if path is not None and os.path.isfile(path):
                    self._debug_files.setdefault(objfile.owner.filename, {})[objfile.filename] = path
                return
            path = local_path(objfile)
            if path is None:
                return
            self._files.setdefault(objfile.progspace, {})[objfile] = (path, objfile.filename)
            self.mark_stale()
        except Exception as exc:         # events must never raise into GDB
            self.log("cannot track objfile %r: %s" % (getattr(objfile, "filename", "?"), exc))

    def remove(self, objfile):
        for files in self._files.values():
            files.pop(objfile, None)
        self.mark_stale()

    def clear(self, progspace=None):
        if progspace is None:
            self._files.clear()
        else:
            self._files.pop(progspace, None)
        self.mark_stale()

    def scan(self):
        """Track every objfile of every program space (when the plugin is loaded)."""
        for ps in gdb.progspaces():
            for objfile in ps.objfiles():
                self.add(objfile)

    def mark_stale(self, *_):
        self._stale = True
        self._sections = None
        self.on_change(True)

    def check_progspace(self, *_):
        """Before a prompt: another inferior may have been selected."""
        if not self._stale and gdb.current_progspace() is not self._current_ps:
            self.mark_stale()

    def modules(self, progspace=None):
        """The program space's ModuleSet, in step with its objfiles (indexes built on use)."""
        from ..core.unwind.modules import ModuleSet
        ps = progspace or gdb.current_progspace()
        ms = self._sets.get(ps)
        if ms is None:
            ms = self._sets[ps] = ModuleSet(log=self.log)
            self._added[ps] = set()
        files = self._files.get(ps, {})
        added = self._added[ps]
        for gone in [o for o in added if o not in files or not _valid(o)]:
            ms.remove(gone)
            added.discard(gone)
        for objfile, (path, name) in files.items():
            if objfile not in added and _valid(objfile):
                self._add_module(ms, objfile, path, name)
                added.add(objfile)
        return ms

    def _add_module(self, ms, key, path, name):
        holder = []
        m = ms.add(key, path, bias=lambda: self._bias(holder[0]), loader=lambda: self._read_section(holder[0]),
                   cfi_loader=lambda: self._read_cfi(holder[0]), gdb_name=name)
        holder.append(m)
        return m

    def _read_section(self, module):
        """(bytes, load address, name) of a module's .sframe, read through GDB (which has parsed the
        ELF file already and knows where the section is loaded): no ELF parsing here.  The
        ModuleSet falls back to the file if this raises."""
        from ..core.errors import EmptySFrameError, NoSFrameError
        where = self._where(module, SFRAME)
        if where is None:
            raise NoSFrameError("%s: no .sframe section" % module.path)
        lo, hi, reloc = where
        module.extra["runtime"] = lo
        if reloc:
            return self._read_relocatable(module, lo)
        if hi <= lo:
            raise EmptySFrameError("%s: the .sframe section is empty (no SFrame data)" % module.path)
        data = bytes(gdb.selected_inferior().read_memory(lo, hi - lo))
        if module.file is None and remotecopy.remote_name(module.path) is not None:
            try:
                self._fetch(module, data)
            except Exception as exc:      # (the SFrame read is good: it goes on from memory alone)
                module.file, module.source = "", "target memory (%s)" % exc
                self.log("%s: %s" % (module.path, module.source))
        return data, lo, ".sframe"

    def _fetch(self, module, data):
        """A remote target's file, for what GDB's memory does not hold (symbols, the entry point,
        .debug_frame, the load bias): a local copy by build ID, made once through GDB's own
        `remote get`.  Where none can be had, the module goes on with its SFrame from memory."""
        objfile = module.key
        try:
            hexid = objfile.build_id if _valid(objfile) else None
            build_id = bytes.fromhex(hexid) if hexid else None
        except (ValueError, AttributeError):
            build_id = None
        copy = remotecopy.local_copy(remotecopy.remote_name(module.path), build_id, _remote_get,
                                     lambda path: remotecopy.sframe_as_loaded(path, data))
        module.file = copy.path or ""
        module.source = copy.source if copy.path else "target memory (%s)" % copy.source
        self.log("%s: %s" % (module.path, module.source))
        if copy.path is None:        # its headers and code as memory shows them: the entry point, the bias
            twin = self._in_memory_twin(module.extra.get("runtime"))
            if twin is not None:
                module.reader, module.bias = twin.reader(gdb.selected_inferior().read_memory), twin.bias

    def _in_memory_twin(self, runtime):
        """The module found in the target's memory whose SFrame is at `runtime`, or None."""
        walk = self._memory_walk()
        if runtime is None or walk is None:
            return None
        return next((m for m in walk.found if m.sframe is not None and m.sframe[0] == runtime), None)

    def _memory_walk(self):
        """The live inferior's modules as its memory shows them (core.target.inmemory), walked once
        per refresh (`generation`) however many modules ask; None without a process."""
        inferior = gdb.selected_inferior()
        if not inferior.pid:
            return None
        if self._walk is None or self._walk.generation != self.generation:
            from ..core.target import inmemory
            read, auxv, order = inferior.read_memory, _auxv(), ">" if _big_endian() else "<"
            found, warnings = inmemory.modules(read, auxv, order)
            for w in warnings:
                self.log("target memory: %s" % w)
            self._walk = _Walk(self.generation, read, auxv, order, found)
        return self._walk

    @staticmethod
    def _read_relocatable(module, runtime):
        """An object file's section, from the file with its relocations applied (GDB's memory
        view of the file is unrelocated), placed as GDB places a relocatable file's sections."""
        from ..core.elf.image import ElfImage
        from ..core.errors import ElfError
        module.image = image = ElfImage(module.local_path)
        sf = image.require_sframe()
        if sf.address != runtime:
            raise ElfError("%s: GDB placed %s at %#x, not at %#x as expected: not using it"
                           % (module.path, sf.name, runtime, sf.address))
        return sf.data, sf.address, sf.name

    def _read_cfi(self, module):
        """The objfile's DWARF CFI as core.dwarf.coverage sections: .eh_frame (with .eh_frame_hdr's search
        table) through GDB's memory view, as GDB has it; .debug_frame, not loaded, from the file
        and from its separate debug files."""
        from ..core.dwarf.coverage import CfiSection
        big = module.index.header.big_endian if module.index is not None else False
        out = []
        eh = self._where(module, EH_FRAME)
        if eh is not None:
            inferior = gdb.selected_inferior()
            hdr = self._where(module, EH_FRAME_HDR)
            try:
                out.append(CfiSection(EH_FRAME, bytes(inferior.read_memory(eh[0], eh[1] - eh[0])), eh[0],
                                      bias=lambda: self._file_bias(module, EH_FRAME), big_endian=big,
                                      hdr=hdr and bytes(inferior.read_memory(hdr[0], hdr[1] - hdr[0])),
                                      hdr_address=hdr[0] if hdr else 0))
            except gdb.error as exc:
                from ..core.elf.image import ElfImage
                self.log("%s: cannot read .eh_frame through GDB (%s); reading the file" % (module.path, exc))
                image = module.image or ElfImage(module.local_path)
                out.extend(image.cfi_sections(self._file_bias(module, EH_FRAME, image), (EH_FRAME,)))
        name = module.extra.get("gdb_name")
        paths = ([module.local_path] if module.local_path and self._where(module, DEBUG_FRAME) else []) + [
            path for gdb_name, path in self._debug_files.get(name, {}).items()
            if DEBUG_FRAME in self._all_sections().get(gdb_name, {})]
        if paths:
            from ..core.elf.image import ElfImage
            for path in paths:
                out.extend(ElfImage(path).cfi_sections(lambda: self._file_bias(module, SFRAME), (DEBUG_FRAME,)))
        return out

    def _add_in_memory(self, ms, ps):
        """On a remote target, the modules GDB has no objfile for (it could not read their files:
        a sysroot without them, a board's files gone) that have SFrame in memory, found through
        the auxiliary vector and the dynamic linker's list (core.target.inmemory)."""
        from ..core.target import inmemory
        old = self._in_memory.pop(ps, {})
        walk = self._memory_walk() if _remote(gdb.selected_inferior()) else None
        if walk is None:
            for key in old:
                ms.remove(key)
            return
        read = walk.read
        have = {m.extra.get("runtime") for m in ms if m.key not in old}     # (objfiles' .sframe)
        now = {}
        for mod in walk.found:
            if mod.sframe is None or mod.sframe[0] in have:
                continue
            key = ("memory", mod.sframe, mod.name, mod.build_id)     # (another library in the same place: anew)
            m = old.pop(key, None)
            if m is None:
                addr, size = mod.sframe
                m = ms.add(key, mod.name, bias=mod.bias, cfi_loader=list,
                           loader=lambda addr=addr, size=size: (bytes(read(addr, size)), addr, "PT_GNU_SFRAME"))
                m.file, m.reader = "", mod.reader(read)
                m.source = "target memory (PT_GNU_SFRAME; GDB has no file for it)"
                m.extra["runtime"] = addr
                self.log("%s: SFrame from target memory at %#x (%d bytes)" % (mod.name, addr, size))
            now[key] = m
        for key in old:
            ms.remove(key)
        self._in_memory[ps] = now
        self._chains[ps] = inmemory.link_chain(read, walk.auxv, walk.order) if now else None
        ms.with_sframe()

    def check_memory(self, *_):
        """At a stop: where modules were found in a remote target's memory, has the dynamic
        linker's list changed since (a library GDB has no file for loaded or unloaded, which no
        objfile event tells)?  Then everything is looked at again."""
        try:
            ps = gdb.current_progspace()
            if self._stale or not self._in_memory.get(ps):
                return
            from ..core.target import inmemory
            inferior = gdb.selected_inferior()
            if not inferior.pid:
                return
            chain = inmemory.link_chain(inferior.read_memory, _auxv(), ">" if _big_endian() else "<")
            if chain != self._chains.get(ps):
                self.log("target memory: the dynamic linker's list changed; looking at it again")
                self.mark_stale()
        except Exception as exc:         # events must never raise into GDB
            self.log("target memory: %s" % exc)

    # -- load biases ------------------------------------------------------------------------

    def _all_sections(self):
        if self._sections is None:
            text = gdb.execute("maint info sections -all-objects %s" % " ".join(_WANTED), to_string=True)
            self._sections = parse_sections(text)
        return self._sections

    def _where(self, module, section):
        """(runtime start, end) of one of a module's sections, or None."""
        return self._all_sections().get(module.extra.get("gdb_name"), {}).get(section)

    def _file_bias(self, module, section, image=None):
        """Load bias from the file (`image`, if it is parsed already): a loaded section's runtime
        address minus its sh_addr.  Only CFI with absolute addresses needs it."""
        from ..core.elf.image import ElfImage
        where = self._where(module, section)
        if where is None:
            return 0
        image = image or module.image or ElfImage(module.local_path)
        addr = image.section_address(section)
        return 0 if addr is None else where[0] - addr

    def _bias(self, module):
        """Load bias, when the section had to be read from the file: runtime .sframe - sh_addr."""
        where = self._where(module, SFRAME)
        module.extra["runtime"] = where and where[0]
        if where is None:
            self.log("%s: GDB lists no .sframe section for it; assuming load bias 0" % module.path)
            return 0
        if module.image is None:      # (read through GDB, at its runtime address: the file tells the bias)
            return self._file_bias(module, SFRAME)
        return where[0] - module.image.sframe.address

    def current(self):
        """The current program space's ModuleSet with its biases up to date, or None when no
        objfile of it has SFrame (then nothing else needs doing for a frame)."""
        if self._stale or gdb.current_progspace() is not self._current_ps:
            ps = gdb.current_progspace()
            self._stale = False
            self.generation += 1
            self._sections = None
            ms = self.modules(ps)
            self._refresh(ms)
            self._add_in_memory(ms, ps)
            self._current_ps = ps
            self._current = ms if ms.with_sframe() else None
            if self._current is None:
                self.on_change(False)
        return self._current

    def _refresh(self, ms):
        loaded = ms.with_sframe()             # loads what is pending, with fresh biases
        if not loaded:
            return
        for m in loaded:
            new = (self._where(m, SFRAME) or (None,))[0]
            if new is not None and new != m.extra.get("runtime"):
                self.log("%s: .sframe moved from %s to %#x; rebuilding its index"
                         % (m.path, "?" if m.extra.get("runtime") is None else "%#x" % m.extra["runtime"], new))
                self._add_module(ms, m.key, m.path, m.extra.get("gdb_name"))
        ms.with_sframe()

    # -- events -----------------------------------------------------------------------------

    def connect(self):
        ev = gdb.events
        self._on(ev, "new_objfile", lambda e: self.add(e.new_objfile))
        self._on(ev, "free_objfile", lambda e: self.remove(e.objfile))
        self._on(ev, "clear_objfiles", lambda e: self.clear(getattr(e, "progspace", None)))
        self._on(ev, "free_progspace", lambda e: self._drop_progspace(e.progspace))
        for name in ("new_progspace", "new_inferior", "exited", "executable_changed", "corefile_changed"):
            self._on(ev, name, self.mark_stale)
        for name in ("before_prompt", "selected_context"):
            self._on(ev, name, self.check_progspace)
        self._on(ev, "stop", self.check_memory)

    def _drop_progspace(self, ps):
        self._files.pop(ps, None)
        self._in_memory.pop(ps, None)
        self._chains.pop(ps, None)
        self._sets.pop(ps, None)
        self._added.pop(ps, None)
        self.mark_stale()

    def _on(self, ev, name, fn):
        registry = getattr(ev, name, None)
        if registry is None:
            return

        def handler(*args, fn=fn):
            try:
                fn(*args)
            except Exception as exc:
                self.log("%s event: %s" % (name, exc))
        registry.connect(handler)


_AUXV_RE = re.compile(r"^(\d+)\s+\S+\s.*?\s(0x[0-9a-fA-F]+|\d+)(?:\s+\".*\")?\s*$")


def _auxv():
    """{type: value} of the inferior's auxiliary vector, as `info auxv` shows it ({} if none)."""
    try:
        text = gdb.execute("info auxv", to_string=True)
    except gdb.error:
        return {}
    out = {}
    for line in text.splitlines():
        m = _AUXV_RE.match(line.strip())
        if m:
            out.setdefault(int(m.group(1)), int(m.group(2), 0))
    return out


def _big_endian():
    return "big endian" in gdb.execute("show endian", to_string=True)


def _remote(inferior):
    """Is the inferior reached through the remote protocol (gdbserver, qemu's gdbstub)?"""
    conn = getattr(inferior, "connection", None)
    return conn is not None and conn.type in ("remote", "extended-remote")


def _remote_get(name, dest):
    """Copy the target's file `name` to `dest` (GDB's `remote get`: raises gdb.error)."""
    gdb.execute("remote get %s %s" % (_quoted(name), _quoted(dest)), to_string=True)


def _quoted(path):
    return '"%s"' % path.replace("\\", "\\\\").replace('"', '\\"') if any(c in path for c in ' "\\\'') else path


def _valid(objfile):
    try:
        return objfile.is_valid()
    except Exception:
        return False
