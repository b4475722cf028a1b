"""The SFrame format: its binary layout (format), the decoded records (records), decoding
(decode), encoding (encode), what an FRE's data words say (rules), and the PC -> FDE -> FRE
look-up (index)."""
