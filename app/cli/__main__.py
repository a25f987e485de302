"""``python -m replayscope``: the ``replayscope`` command where it is not installed."""

import sys

from replayscope.app.cli import main

sys.exit(main())
