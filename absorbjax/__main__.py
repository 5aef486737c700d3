"""``python -m absorbjax``: the ``absorbjax`` command (:mod:`absorbjax.cli`)."""

import sys

from absorbjax.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
