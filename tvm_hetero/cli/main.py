"""The `tvm-hetero` command line: thin subcommands over the Python API, one error boundary."""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import HeteroError, error_message
from . import (compile_cmd, devices_cmd, inspect_cmd, optimizations_cmd, report_cmd, run_cmd,
               tune_cmd)

SUBCOMMANDS = [inspect_cmd, devices_cmd, tune_cmd, compile_cmd, run_cmd, report_cmd,
               optimizations_cmd]


class _Parser(argparse.ArgumentParser):
    """Usage mistakes print one `Error: ...` line, like every other user error."""

    def error(self, message):
        self.exit(2, f"Error: {message} (see {self.prog} --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tvm-hetero",
        description="Place the layers of one neural network across several devices and build "
                    "one executable with Apache TVM.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-v info, -vv debug with tracebacks)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except HeteroError as err:
        if args.verbose >= 2:
            logging.exception("user error")
        print(f"Error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: one line by default, the traceback with -vv
        if args.verbose >= 2:
            raise
        print(f"Error: internal error {error_message(err, with_type=True)} (rerun with -vv "
              "for the traceback, and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
