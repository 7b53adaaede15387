"""The tiers' own speed: keys per second of each backend, and what a call on a store's pace costs.

bench/README.md lists the commands.
"""
