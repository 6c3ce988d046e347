"""A run's cost before it runs (``bench run --dry-run``): the counts of model inputs and calls (``counts``), the time
scaled from a finished slice (``slice_time``) and the dry run's text (``dry_run``). It describes the run; the run
(:mod:`faithbench.bench.run`) never consults it."""
