"""The ``bench`` entry module: ``python -m bench`` from any directory (installed as the top-level ``bench``).

It only dispatches to :mod:`faithbench.bench.cli`; everything importable lives under ``faithbench``.
"""
