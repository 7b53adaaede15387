"""Build-time tools: the PEP 517 backend, the package layout, type checking."""
