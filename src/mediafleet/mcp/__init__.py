"""``mediafleet serve-mcp``: the callers' four tools (:mod:`.server`), an upstream catalog server
behind them (:mod:`.upstream`), jobs that outlive a call without a broker (:mod:`.localjobs`), and
the digest a caller sends (:mod:`.caller_digest`)."""
