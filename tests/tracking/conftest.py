"""Tests of the tracker: its modules one by one, and the whole of it on synthetic scenes with ground truth.

The helpers here (`synthetic_scenes`, `mot_metrics`) are imported by name, like the peers' `shapes`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
