"""Unwinding: one frame from the next (unwinder), many at once (ahead), the loaded modules a PC is
looked up in (modules, tracker), and which unwinder takes a frame (policy)."""
