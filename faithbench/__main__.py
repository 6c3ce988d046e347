from faithbench.bench.cli import main

raise SystemExit(main(prog="python -m faithbench"))
