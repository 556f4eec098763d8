"""Settings shared by the whole suite.

Hypothesis draws the same examples on every run (``derandomize``), so the suite a fresh clone
runs in CI is the suite that passed here, and a failure reproduces from the commit alone.
``HYPOTHESIS_PROFILE=explore`` draws fresh examples (and keeps Hypothesis's database of
failures) for a search beyond the fixed ones.
"""

import os

from hypothesis import settings

settings.register_profile("reproducible", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))
