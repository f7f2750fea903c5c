"""The ``ternary`` command line: one module per subcommand, registered here.

Each ``runtime/cli/<name>.py`` module defines ``register(subparsers)``, which adds its parser and
sets ``func`` (a callable taking the parsed args and returning an exit code). A dotted name in
:data:`SUBCOMMAND_MODULES` is a module outside this package with the same ``register`` (the app's
``ternary kb`` lives beside the knowledge base it drives, in ``app.knowledge.cli``). Errors a user can act
on (:class:`runtime.errors.TernaryError`) print one line and exit 1; ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from runtime import __version__
from runtime.errors import TernaryError

# Order = order in --help.
SUBCOMMAND_MODULES = [
    "convert",
    "inspect_cmd",
    "generate",
    "chat",
    "plan",
    "bench",
    "models",
    "download",
    "verify",
    "token",
    "serve",
    "export",
    "app.knowledge.cli",  # ternary kb
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ternary",
        description="Ternary Chat runtime: convert, inspect, run and benchmark ternary Bonsai models.",
    )
    parser.add_argument("--version", action="version", version=f"ternary-chat {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        qualified = name if "." in name else f"runtime.cli.{name}"
        try:
            module = importlib.import_module(qualified)
        except ModuleNotFoundError as exc:
            if exc.name and (qualified == exc.name or qualified.startswith(exc.name + ".")):
                continue  # subcommand (or the package holding it) not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TernaryError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError) as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
