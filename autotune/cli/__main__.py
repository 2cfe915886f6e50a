"""``python -m autotune.cli`` runs the command line."""

from autotune.cli import main

main()
