"""The spec states nothing the code ignores: every field that is not prose is read by the harness.

The spec document is wrapped in a mapping that records every key the code looks up. The harness
then does what a run does (load checks, case generation, every expectation of the default suite,
explanations, profiles, warnings); a field nobody looked up is decoration and fails the test.

Reading the whole document without meaning does not count: `spec_hash` serialises the document to
hash it, which touches every field, so the recording is paused while it runs. Copies made with
`copy.deepcopy` bypass the recording too (see `Recording.__deepcopy__`).
"""

from __future__ import annotations

import contextlib
import copy
import sys
import uuid

import pytest

from conformance.core import specload
from conformance.core.model import Spec
from conformance.core.specload import load_spec

# Keys whose values are prose for people (rationale, links, descriptions): never read by code.
PROSE = {"rationale", "reference", "references", "meaning", "title", "summary", "applies", "definition", "text",
         "evidence", "result", "operand", "scaling", "precision", "names", "magnitude", "rule", "policy",
         "inputs", "output", "deprecated"}
# Fields, by dotted path (`*` matches one key), that are prose where the same key elsewhere is not:
# - errors[].when says in words when an error is due. The reference decides that in code
#   (reference/forward.py), trying the rows in their order; the words are for people. (A warning
#   row's `when` is a mapping the reference reads: it is not prose.)
# - gradients.dtype says in words that a gradient has its argument's dtype; the reference states
#   it in code (each gradient part's expected dtype is its argument's).
# - signature.parameters.*.default are the API's defaults, stated for people: every case passes
#   every argument, so no expectation depends on a default. (The reduction's default is also
#   checked to be one of its values; the others are read by nothing.)
PROSE_AT = {"errors[].when", "gradients.dtype", "signature.parameters.*.default"}
# Fields checked by the schema alone: a constant the document declares about itself, or a field the
# schema allows one value, which the code assumes (gradients.second_order.part is `grad2_input`;
# tolerance.comparison.signed_zero.matters is `never`: the comparator's |result - expected| treats -0 as +0).
SCHEMA_ONLY = {"spec_version", "name", "gradients.second_order.part", "tolerance.comparison.signed_zero.matters"}


def _matches(path: str, patterns: set[str]) -> bool:
    """Whether `path` is one of `patterns`, or lies under one; `*` in a pattern matches any one key."""
    keys = path.split(".")
    return any(len(keys) >= len(p) and all(want in ("*", got) for want, got in zip(p, keys))
               for p in (pattern.split(".") for pattern in patterns))


# A mapping of a choice's alternatives to their descriptions, under the key `choices`: reading the
# mapping's keys (iterating it, or asking whether a key is in it) is reading it.
CHOICE_LISTS = {"choices"}


class Recorder:
    """What was read: dotted paths, with `[]` for any list element. Paused while it is not recording."""

    def __init__(self):
        self.read: set[str] = set()
        self.paused = 0

    def add(self, path: str) -> None:
        if not self.paused:
            self.read.add(path)

    @contextlib.contextmanager
    def pause(self):
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1


class Recording(dict):
    """A dict that records the dotted path of every key read through it (and through its children).

    Looking a key up records `path.key`; iterating the mapping or testing membership records `path`
    itself (its keys were read)."""

    def __init__(self, data, path="", recorder=None):
        super().__init__()
        self.path, self.recorder = path, recorder if recorder is not None else Recorder()
        for key, value in dict.items(data):  # dict's own: wrapping a Recording reads nothing
            super().__setitem__(key, _wrap(value, f"{path}.{key}" if path else str(key), self.recorder))

    def __getitem__(self, key):
        self.recorder.add(f"{self.path}.{key}" if self.path else str(key))
        return super().__getitem__(key)

    def __iter__(self):
        self.recorder.add(self.path)
        return super().__iter__()

    def __contains__(self, key):
        self.recorder.add(self.path)
        return super().__contains__(key)

    def keys(self):
        self.recorder.add(self.path)
        return super().keys()

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
        # dict's own methods: a copy reads nothing; reads of the copy are recorded as reads of the original
        return Recording({k: copy.deepcopy(dict.__getitem__(self, k), memo) for k in dict.keys(self)},
                         self.path, self.recorder)


class RecordingList(list):
    def __init__(self, data, path, recorder):
        super().__init__(_wrap(v, f"{path}[]", recorder) for v in data)

    def __deepcopy__(self, memo):
        return [copy.deepcopy(v, memo) for v in self]


def _wrap(value, path, recorder):
    if isinstance(value, dict):
        return Recording(value, path, recorder)
    if isinstance(value, list):
        return RecordingList(value, path, recorder)
    return value


def _leaves(data, path=""):
    """The fields that must be read: (path, is_choice_list) for every field that is not prose."""
    if isinstance(data, dict):
        for key, value in data.items():
            child = f"{path}.{key}" if path else str(key)
            if key in PROSE or _matches(child, PROSE_AT):
                continue
            if key in CHOICE_LISTS:
                yield child, True
                continue
            yield from _leaves(value, child)
    elif isinstance(data, list):
        if not any(isinstance(value, (dict, list)) for value in data):
            yield path, False  # a list of plain values is read when the list is
            return
        for value in data:
            yield from _leaves(value, f"{path}[]")
    else:
        yield path, False


def _is_read(path: str, choice_list: bool, read: set[str]) -> bool:
    if not choice_list:
        return path in read
    # a choice list is read when its keys are: it was iterated, asked about, or one alternative looked up
    return path in read or any(r.startswith(path + ".") for r in read)


@contextlib.contextmanager
def _hash_unrecorded(recorder: Recorder):
    """Pause the recording while spec_hash runs, wherever a module of the harness bound it by name."""
    real = specload.spec_hash

    def quiet(data):
        with recorder.pause():
            return real(data)

    with pytest.MonkeyPatch.context() as mp:
        for name, module in list(sys.modules.items()):
            if (name.split(".")[0] in {"conformance", "reference"}
                    and getattr(module, "spec_hash", None) is real):
                mp.setattr(module, "spec_hash", quiet)
        yield


def unread_fields() -> list[str]:
    """Run what a run does on a recording of the spec; return the non-prose fields nobody read."""
    from conformance.cases.generate import DEFAULT_SEED, generate_cases
    from conformance.core.choices import with_alternatives
    from conformance.core.model import Expected, Observation
    from conformance.core.specload import _check_consistency
    from conformance.judge import compare
    from conformance.judge.casejudge import expected_for
    from conformance.judge.explain import _candidate_sets
    from conformance.judge.profiles import apply_deviations, load_profile
    from conformance.reference.forward import takes_input_space
    from conformance.reference.statements import _VERIFIED, verify_formulas

    plain = load_spec()
    recorded = Recording(copy.deepcopy(dict(plain.data)))
    recorder = recorded.recorder
    # a hash of its own, so that no cache keyed by the spec's hash answers for it (explain's candidates)
    spec = Spec(data=recorded, source=plain.source, hash=f"{plain.hash}-recorded-{uuid.uuid4().hex}")
    with _hash_unrecorded(recorder):
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
        compare.missing_warnings(Expected(result_dtype="float32", warnings=("mean_not_kl", "legacy_arguments")),
                                 Observation(), spec)
    return sorted({path for path, choice_list in _leaves(dict(plain.data))
                   if not _matches(path, SCHEMA_ONLY) and not _is_read(path, choice_list, recorder.read)})


def test_every_field_that_is_not_prose_is_read():
    unread = unread_fields()
    assert not unread, f"spec fields no code reads (decoration): {unread}"


def test_a_field_whose_reader_is_gone_is_reported(monkeypatch):
    """The check can fail: with missing_warnings no longer reading `match`, the field is unread."""
    from conformance.judge import compare

    def blind(expected, observed, spec):
        return tuple(row["id"] for row in spec.data["warnings"]["expected"] if row["id"] in expected.warnings)

    monkeypatch.setattr(compare, "missing_warnings", blind)
    assert unread_fields() == ["warnings.expected[].match"]


def test_the_hash_reads_nothing():
    """spec_hash serialises the whole document: that is no reading, so it records no field."""
    recorded = Recording(dict(load_spec().data))
    with _hash_unrecorded(recorded.recorder):
        specload.spec_hash(recorded)
    assert recorded.recorder.read == set()
