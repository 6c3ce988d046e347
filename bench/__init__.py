"""faithbench command line, suites, runner, results and reports (``python -m bench``)."""

__version__ = "0.1.0"
