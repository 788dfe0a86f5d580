"""``tests.faulty_worker`` with the CLI taking a ``sentinel://`` broker URL.

The CLI's broker check (``mediafleet.cli.entry._broker_problem``) accepts ``redis://`` and
``rediss://`` only; until it accepts ``sentinel://`` too (the change is the lead's to make, in
``src/mediafleet/cli/entry.py``), this launcher lets a Sentinel URL through it and runs the faulty
worker as ``python -m tests.chaos.sentinel_worker worker ...``. Everything past that check is the
real worker.
"""

from __future__ import annotations

import sys

from mediafleet.cli import entry

_checked = entry._broker_problem


def _broker_problem(url: str, where: str) -> str | None:
    return None if url.startswith("sentinel://") else _checked(url, where)


entry._broker_problem = _broker_problem

if __name__ == "__main__":
    import tests.faulty_worker  # noqa: F401 - it installs its misbehaving extractors
    from mediafleet.cli import main

    sys.exit(main(sys.argv[1:]))
