"""``python -m navi_memory.cli``: the same as the ``navi-memory`` console script."""

import sys

from navi_memory.cli.app import main

sys.exit(main())
