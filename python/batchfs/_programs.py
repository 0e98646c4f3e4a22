"""The `batchfs` and `mkbatchfs` commands of a pip-installed package: each runs the
program find_binary() finds (the package's own copy, built by `pip install ./python`)
in its place, with the same arguments."""
from __future__ import annotations

import os
import sys
from typing import NoReturn

from ._mount import find_binary


def _exec(name: str) -> NoReturn:
    try:
        path = find_binary(name)
    except FileNotFoundError as e:
        print(f"{name}: {e}", file=sys.stderr)
        sys.exit(127)  # the shell's "command not found"
    os.execv(path, [name] + sys.argv[1:])


def batchfs() -> NoReturn:
    """The `batchfs` command: the daemon (and `batchfs top`, `batchfs worker`, ...)."""
    _exec("batchfs")


def mkbatchfs() -> NoReturn:
    """The `mkbatchfs` command: packs a dataset into a .bfs file."""
    _exec("mkbatchfs")
