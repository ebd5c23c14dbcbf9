"""Generated mutants reviewed as equivalent to the original: their id and why no test can tell them apart.

The campaign (tests/mutation/campaign.py) does not run them and does not count them in its scores.
"""

from __future__ import annotations

EQUIVALENT: dict[str, str] = {}
