"""Standalone reproducers: a script that needs only one framework (and NumPy, for Python ones).

The case comes from its id (generated cases are rebuilt from id and seed), from a user
case file, or from an earlier run directory (which keeps its seed and its user cases).
Before writing, the case is minimised: if a single element of it diverges the same
way, the script uses that element alone, which is what one pastes into an upstream issue.
A run's reproducers of a compiled mode keep their whole case (each candidate would compile again).
Composes the adapter, the reference and the comparator; runs in the framework's environment.

The modules: source.py (where a reproducer finds its case), minimise.py (the single element that diverges
the same way) and scripts.py (writes the scripts: write_all for a run, write_script for one case). This file
imports none of them.

Writes scripts into a run's staging folder (the run's own reproducers), or into a folder of their own
(`repro --all OUT`: core/generated.py, never a run's folder); never rewrites the results themselves.
"""
