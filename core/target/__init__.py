"""Stopped programs read without a debugger: ELF core files (corefile and its parts) and running
processes (live); backtrace: what `sframe backtrace` needs of them."""
