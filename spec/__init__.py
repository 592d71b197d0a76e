"""Data package: the canonical spec of kl_div and the JSON Schemas beside it.

Installed as `conformance.spec` so the engine finds these files wherever it is installed.
"""
