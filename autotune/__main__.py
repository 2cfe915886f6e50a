"""``python -m autotune`` runs the command line, as the ``autotune`` entry point does."""

from autotune.cli import main

if __name__ == "__main__":
    main()
