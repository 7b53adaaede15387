"""Hypothesis profiles for the whole suite; choose one with HYPOTHESIS_PROFILE.

* ``default`` — local development: a moderate number of examples.
* ``ci`` — what ``.ci/run`` uses: derandomized (the same examples on every
  run, so CI never fails by luck and never passes by luck), bounded examples,
  no deadline (a shared CI machine's timing is not a property of the code).
* ``nightly`` — many more examples and longer stateful runs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=100, stateful_step_count=40, deadline=None)
settings.register_profile(
    "ci",
    max_examples=150,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=3000,
    stateful_step_count=120,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
