"""What the verified manager costs the scheduler thread: per operation, in steps of delay, in memory.

Each module is one question, against the unverified baseline
(:mod:`bench.hotpath.baseline`) and vLLM's released manager
(:mod:`bench.hotpath.vllm_peer`): ``cost``, ``latency``, ``memory``,
``groups`` and ``profile``.  bench/README.md lists the commands.
"""
