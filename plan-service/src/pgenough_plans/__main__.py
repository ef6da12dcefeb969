"""``python -m pgenough_plans``: the ``pgenough-plans`` command, where its script is not on
PATH."""

from pgenough_plans.cli import main

main()
