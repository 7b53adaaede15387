"""vLLM 0.33 in a fleet: its obj tier as shipped, with the one-line switch, and kvprobe's ObjTier, side by side."""
