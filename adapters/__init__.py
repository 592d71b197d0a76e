"""Adapters: one file per framework, each running the spec's cases through that framework's real APIs.

Installed as `conformance.adapters`, a wing of its own: it imports the core only, and each framework only
inside its adapter's load().
"""
