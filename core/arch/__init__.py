"""The ABIs SFrame describes (AMD64, AArch64, s390x): every per-ABI fact as data (abi), and the
Linux signal-frame layouts (sigframe).  Below everything but core.errors and the SFrame layout
(core.sframe.format), which numbers the ABIs."""
