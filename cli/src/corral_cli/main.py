"""The `corral` command: one entry point, one module per sub-command under `corral_cli.commands`.

Each sub-command module exposes `register(subparsers)`, which adds its parser and sets `func` to a
callable taking the parsed arguments and returning the exit code. Discovering them here keeps
sub-commands independent: adding one never touches this file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence

from corral_cli import commands
from corral_cli.version import version_text


def build_parser(prog: str = "corral") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=version_text())
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "corral") -> int:
    args = build_parser(prog).parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl corral …`: kubectl runs the `kubectl-corral` executable it finds on PATH with the
    rest of the command line; the same commands, named as the operator typed them."""
    return main(argv, prog="kubectl corral")


if __name__ == "__main__":
    sys.exit(main())
