"""faithbench's command line, suites, runner, results and reports (``faithbench.bench``; ``python -m bench``)."""

__version__ = "0.1.0"
