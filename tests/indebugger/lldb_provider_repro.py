"""The smallest frame provider LLDB 22 and 23 cannot take (tests/test_lldb_provider.py, docs/lldb.md):
frame 1 as a ScriptedFrame with a register context, the other frames LLDB's own.  `bt` with it
registered crashes LLDB (segmentation fault) or hangs it when it asks for frame 2.

    (lldb) command script import lldb_provider_repro.py
    (lldb) target create frames; breakpoint set -n stop_here; run
    (lldb) target frame-provider register -C lldb_provider_repro.Provider
    (lldb) bt
"""

import lldb
from lldb.plugins.scripted_frame_provider import ScriptedFrameProvider
from lldb.plugins.scripted_process import ScriptedFrame


class Frame(ScriptedFrame):
    def __init__(self, thread, idx, pc):
        super().__init__(thread, lldb.SBStructuredData())
        self.idx, self.pc = idx, pc

    def get_id(self):
        return self.idx

    def get_pc(self):
        return self.pc

    def get_register_context(self):
        return bytes(8 * len(self.get_register_info()["registers"]))


class Provider(ScriptedFrameProvider):
    @staticmethod
    def get_description():
        return "frame 1 as a ScriptedFrame, the others LLDB's own"

    def get_frame_at_index(self, idx):
        if idx >= 4:                    # frames.c at stop_here: stop_here, level3, level2, level1
            return None
        if idx == 1:
            return Frame(self.thread, 1, self.input_frames.GetFrameAtIndex(1).GetPC())
        return idx
