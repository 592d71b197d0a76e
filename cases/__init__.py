"""Cases: generated from the spec (pairwise design plus edge families) or loaded from user files.

Installed as `conformance.cases`. Never imports a framework.
"""
