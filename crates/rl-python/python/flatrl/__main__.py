"""``python -m flatrl ...``: the ``flatrl`` command (see ``flatrl.cli``)."""

from flatrl.cli import main

main()
