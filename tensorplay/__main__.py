"""``python -m tensorplay``: the command line (see :mod:`tensorplay.cli`)."""
import sys

from tensorplay.cli import main

if __name__ == "__main__":
    sys.exit(main())
