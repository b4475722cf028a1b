"""A core file's memory: its PT_LOAD segments' bytes, and what to say where they have none.

The bytes between p_filesz and p_memsz were left out, not zero: the core file's owner
(`CoreFile`) may find them in the read-only file mapped there, through the `fallback` given to
`read`.
"""

import bisect
from typing import BinaryIO, Callable, List, Optional

from ..elf.image import PF_R, PF_W, ProgramHeader

MAX_STRING = 4096


class CoreMemoryError(Exception):
    """Memory the core file does not hold and no mapped file can provide."""

    def __init__(self, address, reason="not in the core file nor in a read-only mapped file"):
        self.address = address
        self.reason = reason
        super().__init__("cannot read memory at %#x: %s" % (address, reason))


def page_down(x: int, page: int) -> int:
    return x - x % page


def page_up(x: int, page: int) -> int:
    return page_down(x + page - 1, page)


class CoreMemory:
    """The PT_LOAD segments of the core file at `path` (ProgramHeaders), read on demand."""

    def __init__(self, path: str, segments: List[ProgramHeader], byte_order: str):
        self.path = path
        self.segments = sorted(segments, key=lambda s: s.vaddr)
        self._starts = [s.vaddr for s in self.segments]
        self.byte_order = byte_order
        self._fh: Optional[BinaryIO] = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def segment_at(self, addr: int) -> Optional[ProgramHeader]:
        """The PT_LOAD segment containing addr, or None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            seg = self.segments[i]
            if addr < seg.vaddr + seg.memsz:
                return seg
        return None

    def next_segment_start(self, addr: int) -> Optional[int]:
        i = bisect.bisect_right(self._starts, addr)
        return self._starts[i] if i < len(self._starts) else None

    def core_bytes(self, offset: int, size: int) -> bytes:
        if self._fh is None:
            self._fh = open(self.path, "rb")
        self._fh.seek(offset)
        return self._fh.read(size)

    def read_core_only(self, addr: int, size: int) -> Optional[bytes]:
        """Bytes at addr held by the core file itself, or None (no file fallback)."""
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            seg = self.segment_at(cur)
            if seg is None or cur >= seg.vaddr + seg.filesz:
                return None
            n = min(end, seg.vaddr + seg.filesz) - cur
            data = self.core_bytes(seg.offset + cur - seg.vaddr, n)
            if len(data) < n:
                return None
            out += data
            cur += n
        return bytes(out)

    def read(self, addr: int, size: int,
             fallback: Callable[[int, int, Optional[ProgramHeader]], Optional[bytes]],
             missing: Callable[[int], str]) -> bytes:
        """size bytes at addr: from the core, else from `fallback(cur, end, segment or None)`.

        Raises CoreMemoryError naming the first address neither provides, and why (`missing(cur)`
        says it when a read-only mapping's bytes cannot be had from its file).
        """
        if size < 0:
            raise ValueError("negative read size %d" % size)
        if addr < 0 or addr + size > 1 << 64:
            raise CoreMemoryError(addr, "address out of range")
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            seg = self.segment_at(cur)
            data: Optional[bytes]
            if seg is not None and cur < seg.vaddr + seg.filesz:
                n = min(end, seg.vaddr + seg.filesz) - cur
                data = self.core_bytes(seg.offset + cur - seg.vaddr, n)
                if len(data) < n:
                    raise CoreMemoryError(cur + len(data), "core file is truncated")
            else:
                data = fallback(cur, end, seg)
                if data is None:
                    if seg is None:
                        raise CoreMemoryError(cur, "not mapped in the process")
                    if seg.flags & PF_W or not seg.flags & PF_R:
                        raise CoreMemoryError(cur, "not in the core file (a %s mapping the core left out)"
                                              % ("writable" if seg.flags & PF_W else "non-readable"))
                    raise CoreMemoryError(cur, missing(cur))
            out += data
            cur += len(data)
        return bytes(out)

    @staticmethod
    def cstring(read: Callable[[int, int], bytes], addr: int, limit: int = MAX_STRING) -> str:
        """A NUL-terminated string at addr through read(addr, size) (in small steps: it may end
        near a gap)."""
        out = bytearray()
        while len(out) < limit:
            chunk_end = page_up(addr + 1, 64)
            chunk = read(addr, chunk_end - addr)
            nul = chunk.find(b"\0")
            if nul >= 0:
                out += chunk[:nul]
                break
            out += chunk
            addr = chunk_end
        return out.decode("utf-8", "surrogateescape")
