"""The save-slot analysis: where a function has put each callee-saved register, proved from its
code (analysis: the API; flow: the data flow; x86insn, a64insn, s390insn: instruction decoders)."""
