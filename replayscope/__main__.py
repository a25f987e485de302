"""``python -m replayscope ARGS...``: the ``replayscope`` command where it is not on PATH."""

import sys

from replayscope.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
