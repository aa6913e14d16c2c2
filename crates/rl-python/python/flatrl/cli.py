"""The ``flatrl`` command: the ``rl`` command line (train, plan, eval, resume, plot, list,
export) over the built-in environments and any Gymnasium environment a config names
(``env = "gymnasium:HalfCheetah-v5"``, ``"CartPole-v1"``, ``"ALE/Pong-v5"``), for a
Python that has Gymnasium. The same configs, run directories and exit codes as ``rl``."""

from __future__ import annotations

import sys

from flatrl._flatrl import cli_main


def main(argv: list[str] | None = None) -> int:
    """Runs the command line ``argv`` (default ``sys.argv``) and exits with its code
    when called as the console script; returns the code when given ``argv``."""
    code = cli_main(list(sys.argv if argv is None else ["flatrl", *argv]))
    if argv is None:
        sys.exit(code)
    return code
