"""The shipped stateful machine against the real manager, as the project's own suite.

Example counts and step counts come from the Hypothesis profile
(HYPOTHESIS_PROFILE=default|ci|nightly, see tests/conftest.py).
"""

from __future__ import annotations

from hypothesis import settings

from kvprobe.testing.stateful import lookup_machine

# The manual worker: Hypothesis chooses every interleaving of scheduler and worker.
TestManualWorker = lookup_machine().TestCase

# The real ThreadedWorker: each flush waits for it, so runs are slower; fewer examples.
_Threaded = lookup_machine(worker="thread")
_Threaded.TestCase.settings = settings(settings(), max_examples=max(10, settings().max_examples // 4))
TestThreadedWorker = _Threaded.TestCase

# The real ThreadedWorker with a timeout: a flush may make its first backend call hang
# past the timeout (TIMEOUT is published, the worker moves on) and a later step releases
# it (the late answer is dropped).  The timeout is far above scheduling noise, so only
# the scripted hang can exceed it.
_Timeouts = lookup_machine(worker="thread", lookup_timeout_s=0.5)
_Timeouts.TestCase.settings = settings(settings(), max_examples=max(5, settings().max_examples // 10))
TestThreadedWorkerTimeouts = _Timeouts.TestCase
