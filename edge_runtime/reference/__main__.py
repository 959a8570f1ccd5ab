"""`python -m edge_runtime.reference [DIR]`: write the reference pages (default: docs/reference)."""

from __future__ import annotations

import sys
from pathlib import Path

from edge_runtime.reference import PAGES_DIR, write_pages

for written in write_pages(Path(sys.argv[1]) if len(sys.argv) > 1 else PAGES_DIR):
    print(written)
