"""``python -m app.cli``: the ``replayscope`` command where it is not installed."""

import sys

from app.cli import main

sys.exit(main())
