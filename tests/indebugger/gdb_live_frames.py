"""Run by `gdb -p PID -x` (tests/helpers/gdb.py live_frames): every thread's frames, as GDB's own unwinders
give them, past main and past the entry point, printed as one line `GDBJSON [...]` (frame types by
name)."""
import json

import gdb

for c in ("set backtrace past-main on", "set backtrace past-entry on", "set backtrace limit 2000"):
    gdb.execute(c)
TYPES = {gdb.INLINE_FRAME: "inline", gdb.TAILCALL_FRAME: "tailcall", gdb.SIGTRAMP_FRAME: "sigtramp"}
out = []
for t in sorted(gdb.selected_inferior().threads(), key=lambda t: t.ptid[1]):
    t.switch()
    frames = []
    f = gdb.newest_frame()
    while f is not None:
        frames.append(dict(pc=int(f.pc()), type=TYPES.get(f.type(), "normal"), name=f.name()))
        try:
            f = f.older()
        except gdb.error:
            break
    out.append(dict(lwp=t.ptid[1], frames=frames))
print("GDBJSON " + json.dumps(out))
gdb.execute("detach")
