"""Does the manager hold up: fault campaigns, a long soak, and the scheduler while the worker is busy.

bench/README.md lists the commands.
"""
