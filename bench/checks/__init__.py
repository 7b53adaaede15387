"""What the checks cost and how strong they are: TLC per config, and ``kvprobe conform``'s power.

bench/README.md lists the commands.
"""
