"""kvprobe.testing: test machinery shipped with the library.

Third-party tiers can run the same stateful machine the project runs
(``kvprobe conform``), as zarr ships ``zarr.testing.stateful``.
"""

__all__: list[str] = []
