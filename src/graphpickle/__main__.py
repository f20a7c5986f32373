"""``python -m graphpickle``: the command line (``graphpickle.cli``)."""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
