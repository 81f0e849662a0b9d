"""``python -m polydg.assemble``: assemble (and solve) an IP-dG system from the command line.

With no arguments it runs a small 2D default (the paper's 2D problem on a
unit square of 8,192 triangles agglomerated into 256 polygons, p = 2, solved
directly) and prints what it did.  Run ``python -m polydg.assemble --help``
for the options.  The command line lives in :mod:`polydg.cli`; this module
is its ``-m`` entry (and that of the ``polydg-assemble`` script).
"""

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
