"""The spec states nothing the code ignores: every field that is not prose is read by the harness.

The spec document is wrapped in a mapping that records every key the code looks up. The harness
then does what a run does (load checks, case generation, every expectation of the default suite,
explanations, profiles, warnings); a field nobody looked up is decoration and fails the test.
"""

from __future__ import annotations

import copy

from conformance.core.model import Spec
from conformance.core.specload import load_spec

# Keys whose values are prose for people (rationale, links, descriptions): never read by code.
PROSE = {"rationale", "reference", "references", "meaning", "title", "summary", "applies", "definition", "text",
         "evidence", "result", "operand", "scaling", "precision", "names", "magnitude", "rule", "policy",
         "inputs", "output", "deprecated"}
# Fields checked by the schema alone (a constant the document declares about itself).
SCHEMA_ONLY = {"spec_version", "name"}


class Recording(dict):
    """A dict that records the dotted path of every key read through it (and through its children)."""

    def __init__(self, data, path="", log=None):
        super().__init__()
        self.path, self.log = path, log if log is not None else set()
        for key, value in data.items():
            super().__setitem__(key, _wrap(value, f"{path}.{key}" if path else str(key), self.log))

    def __getitem__(self, key):
        self.log.add(f"{self.path}.{key}" if self.path else str(key))
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key in self:
            return self[key]
        return default

    def items(self):
        for key in self:
            yield key, self[key]

    def values(self):
        for key in self:
            yield self[key]

    def __deepcopy__(self, memo):
        return Recording({k: copy.deepcopy(dict.__getitem__(self, k), memo) for k in self}, self.path, self.log)


class RecordingList(list):
    def __init__(self, data, path, log):
        super().__init__(_wrap(v, f"{path}[]", log) for v in data)

    def __deepcopy__(self, memo):
        return [copy.deepcopy(v, memo) for v in self]


def _wrap(value, path, log):
    if isinstance(value, dict):
        return Recording(value, path, log)
    if isinstance(value, list):
        return RecordingList(value, path, log)
    return value


# Mappings of a choice's alternatives to their descriptions: reading the mapping (its keys) is reading it.
CHOICE_LISTS = {"choices", "precedences", "divisors", "empties", "broadcastings", "mixeds"}


def _leaves(data, path=""):
    if isinstance(data, dict):
        for key, value in data.items():
            if key in PROSE:
                continue
            child = f"{path}.{key}" if path else str(key)
            if key in CHOICE_LISTS:
                yield child
                continue
            yield from _leaves(value, child)
    elif isinstance(data, list):
        if not any(isinstance(value, (dict, list)) for value in data):
            yield path  # a list of plain values is read when the list is
            return
        for value in data:
            yield from _leaves(value, f"{path}[]")
    else:
        yield path


def test_every_field_that_is_not_prose_is_read():
    from conformance.cases.generate import DEFAULT_SEED, generate_cases
    from conformance.core.choices import with_alternatives
    from conformance.core.model import Expected, Observation
    from conformance.core.specload import _check_consistency
    from conformance.judge.casejudge import expected_for
    from conformance.judge.compare import missing_warnings
    from conformance.judge.explain import _candidate_sets
    from conformance.judge.profiles import apply_deviations, load_profile
    from conformance.reference.forward import takes_input_space
    from conformance.reference.statements import _VERIFIED, verify_formulas

    plain = load_spec()
    recorded = Recording(copy.deepcopy(dict(plain.data)))
    spec = Spec(data=recorded, source=plain.source, hash=plain.hash + "-recorded")
    _check_consistency(recorded, "spec")
    _VERIFIED.clear()
    verify_formulas(spec)
    for case in generate_cases(spec, DEFAULT_SEED):
        for dialect in plain.data["dialects"]:
            if takes_input_space(case, dialect, spec):
                for part in case.parts:
                    expected_for(case, spec, part, dialect)
    for alts in _candidate_sets(spec, 1):
        with_alternatives(spec, alts)
    for framework in ("torch", "oneflow", "mindspore"):
        apply_deviations(spec, load_profile(framework, spec))
    missing_warnings(Expected(result_dtype="float32", warnings=("mean_not_kl", "legacy_arguments")), Observation(),
                     spec)

    read = recorded.log
    unread = sorted({leaf for leaf in _leaves(dict(plain.data))
                     if leaf.split(".")[0] not in SCHEMA_ONLY and leaf not in read})
    assert not unread, f"spec fields no code reads (decoration): {unread}"
