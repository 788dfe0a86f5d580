"""``python -m mediafleet.cli``: the same as the ``mediafleet`` command."""

import sys

from mediafleet.cli.entry import main

sys.exit(main())
