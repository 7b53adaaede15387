"""Whole-request walks (``lookup_chain``): what they cost the scheduler and the backend work they save.

``python -m bench.chains`` (or ``bench.chains.run``) runs them; the parts
are :mod:`bench.chains.cost`, :mod:`bench.chains.saving` and
:mod:`bench.chains.windows`, over the walks of :mod:`bench.chains.walks`.
"""
