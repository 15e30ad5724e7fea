"""``python -m infbench.cli``: the same as the ``infbench`` command."""

from infbench.cli import main

main()
