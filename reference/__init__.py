"""The float64 reference implementation of kl_div, driven by the loaded spec.

Installed as `conformance.reference`.
"""
