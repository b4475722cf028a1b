"""What the tests share: building with the toolchains and roots (toolchains), real programs from
Debian source packages (realprogs), synthetic sections (synthetic), fuzzing (fuzzing,
unwind_fuzzing), running GDB, LLDB and the sframe command (gdb, lldb, cli), and tools (mutants,
objdump_moves).  The scripts that run inside a debugger are in tests/indebugger/."""
