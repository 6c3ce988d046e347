"""``python -m bench``: a thin command line. Each command is one function in a module of this package, named in
:data:`COMMANDS` and imported only when it runs (``list`` loads no runner, ``report`` no model). Parsing, every
``--help`` and ``list`` read the catalog (:mod:`.catalog`), not the registries, so they answer without torch."""

from __future__ import annotations

import errno
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence

from faithbench.bench.cli.parser import build_parser
from faithbench.errors import UserError

# A full disk, a quota, a read-only disk: the environment's, named in one line (the traceback with --debug).
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
COMMANDS = {  # command -> "module:function", imported when the command runs
    "list": "faithbench.bench.cli.listing:cmd_list",
    "zoo": "faithbench.bench.cli.zoo:cmd_zoo",
    "run": "faithbench.bench.cli.run:cmd_run",
    "report": "faithbench.bench.cli.reporting:cmd_report",
    "merge": "faithbench.bench.cli.reporting:cmd_merge",
    "rescore": "faithbench.bench.cli.rescore:cmd_rescore",
    "compare": "faithbench.bench.cli.compare:cmd_compare",
    "status": "faithbench.bench.cli.status:cmd_status",
    "verdicts": "faithbench.bench.cli.verdicts:cmd_verdicts",
    "perf": "faithbench.bench.cli.perf:cmd_perf",
    "numerics": "faithbench.bench.cli.numerics:cmd_numerics",
}


def command(name: str) -> Callable:
    """The function of command ``name`` (its module is imported now)."""
    module, function = COMMANDS[name].split(":")
    return getattr(importlib.import_module(module), function)


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run one command. User errors print one line (exit 2); anything else is a bug or an environment
    problem and shows its traceback (``--debug`` shows it for user errors too). ``prog``: the name the usage
    lines show (default: ``faithbench`` for the console script, else ``python -m bench``)."""
    # Captum announces every hook it sets on activations; a long run would repeat it thousands of times.
    warnings.filterwarnings("ignore", message="Setting .*hooks", category=UserWarning)
    if prog is None:
        prog = "faithbench" if os.path.basename(sys.argv[0]) == "faithbench" else "python -m bench"
    args = build_parser(prog).parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as given: `run --workers` starts it again
    debug = args.debug or os.environ.get("FAITHBENCH_DEBUG", "") not in ("", "0")
    try:
        return command(args.command)(args)
    except UserError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    except OSError as exc:
        if debug or exc.errno not in DISK_ERRNOS:
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        sys.stderr.write(
            f"error: {exc.strerror}{where}; free space (or choose another --out) and run the same command again: "
            "what was finished is kept\n"
        )
        return 1
