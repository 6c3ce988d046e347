"""``python -m bench perf``: faithbench's metrics and methods timed against Quantus and against the model calls
alone. Imports the run and report rooms' helpers, never the command line."""
