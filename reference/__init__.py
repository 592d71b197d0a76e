"""The float64 reference implementation of kl_div, driven by the loaded spec.

Installed as `conformance.reference`, a wing of its own: it imports the core only, never the judge,
the cases or a framework.
"""
