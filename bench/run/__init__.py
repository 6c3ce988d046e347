"""The run: a suite file becomes a plan of jobs (:mod:`.suite`, :mod:`.plan`), the runner executes it on the data
(:mod:`.runner`, :mod:`.evaluate`, :mod:`.pairing`, :mod:`.distributed`) and the store keeps what it finds
(:mod:`.results`, :mod:`.provenance`, the example maps of :mod:`.examples`). Imports no other room of bench/."""
