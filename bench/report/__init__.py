"""The report: leaderboards, statistics, plots and the ``compare`` gate, from a run's files only (it loads no model
and runs no method). Imports the run room's readers, never the command line or perf."""
