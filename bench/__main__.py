import sys

from bench.shadowing import shadowing_problem

_problem = shadowing_problem()  # before anything imports a shadowed package
if _problem:
    sys.stderr.write(f"error: {_problem}\n")
    raise SystemExit(2)

from bench.cli import main  # noqa: E402

raise SystemExit(main())
