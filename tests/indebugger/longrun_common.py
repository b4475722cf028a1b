"""What the long-session drivers inside GDB (tests/indebugger/gdb_longrun.py) and LLDB (tests/indebugger/lldb_longrun.py)
share: the longrun program's call chains, the debugger's resident memory, and each phase's figures
with the one LONGRUN line that tests/test_reliability.py parses:

  LONGRUN phase=P stops=N bad=B addresses=A rss_warm=KiB rss_mid=KiB rss_max=KiB rss_end=KiB rss_low2=KiB rss_low4=KiB ms_per_stop=T
"""

STOP_CHAIN = ("stop_here", "chain_b", "chain_a", "one_round", "main")
LIB_CHAIN = ("lib_stop_here", "lib_middle", "load_round", "main")           # fix_entry tail-calls
CALLBACK_CHAIN = ("exe_callback", "fix_entry", "load_round", "main")


def rss_kib():
    """This process's resident memory (the debugger's: the driver runs inside it)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Phase:
    """The figures of one phase: memory sampled from the end of the warm-up (its first tenth), at
    half way, and at the end; its peak; and its lowest in the second and in the fourth quarter
    (a leak lifts the lows, the debugger's passing peaks do not)."""

    def __init__(self, name, expected):
        self.name = name
        self.expected = expected
        self.stops = self.bad = 0
        self.addresses = set()
        self.warm = self.mid = self.max = self.end = 0
        self.low2 = self.low4 = 0
        self.seconds = 0.0
        self.first_bad = None

    def record(self, ok, address, seconds, why=""):
        """One stop: its backtrace right or not (`why` says how it was wrong), where the code of
        interest was, and the seconds the stop's work took."""
        if not ok:
            self.bad += 1
            self.first_bad = self.first_bad or why
        self.addresses.add(address)
        self.stops += 1
        rss = rss_kib()
        if self.stops == max(self.expected // 10, 1):
            self.warm = rss
        if self.stops == max(self.expected // 2, 1):
            self.mid = rss
        if self.warm:
            self.max = max(self.max, rss)
        if self.expected < 4 * self.stops <= 2 * self.expected:
            self.low2 = min(self.low2 or rss, rss)
        if 4 * self.stops > 3 * self.expected:
            self.low4 = min(self.low4 or rss, rss)
        self.end = rss
        self.seconds += seconds

    def line(self):
        return "LONGRUN phase=%s stops=%d bad=%d addresses=%d rss_warm=%d rss_mid=%d rss_max=%d rss_end=%d " \
            "rss_low2=%d rss_low4=%d ms_per_stop=%.2f%s" % (
                self.name, self.stops, self.bad, len(self.addresses), self.warm, self.mid, self.max, self.end,
                self.low2, self.low4,
                1e3 * self.seconds / max(self.stops, 1), " first_bad=%s" % self.first_bad if self.first_bad else "")
