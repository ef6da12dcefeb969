"""``python -m pgenough``: the ``pgenough`` command, where its script is not on PATH."""

from pgenough.cli import main

main()
