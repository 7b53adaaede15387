"""The pace against its reference model: the stateful machine finds no broken rule in ``PaceCore``."""

from __future__ import annotations

from hypothesis import settings
from pace_machine import pace_machine

TestPaceCore = pace_machine().TestCase
TestPaceCore.settings = settings(settings.default, stateful_step_count=30)
