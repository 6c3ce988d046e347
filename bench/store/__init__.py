"""The store room: the run folder's format, below the run and the report.

Reading and writing a run's files lives here and only here: the unit records and the tidy CSVs built from them
(:mod:`~faithbench.bench.store.results`, :mod:`~faithbench.bench.store.tidy`, their intervals), the pieces and the
claims that workers share (:mod:`~faithbench.bench.store.pieces`, :mod:`~faithbench.bench.store.claims`), the
folder's lock, the example maps and the identical-maps record. The run (``bench/run/``) computes and writes through
it; the report (``bench/report/``) reads through it and never imports the run (``tests/test_architecture.py``).
"""
