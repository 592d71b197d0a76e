"""Judging: the comparator, explanations by spec choice, profiles, the case judge and
the reference cache. Imports the core and the reference; never the run wing, reports or a framework."""
