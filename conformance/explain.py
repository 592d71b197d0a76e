"""Explains a divergence by the spec choice the framework behaves as.

The spec lists, for each convention, every choice the reference can compute. For a
diverging observation, this module recomputes the expectation under each
alternative choice (and each pair of them) and reports the first under which the
observation passes: "pointwise.conventions.target_zero = ieee". Per-framework
profiles of documented deviations build on the same alternatives.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Iterator

from conformance.compare import classify
from conformance.model import Case, Observation, Spec, Verdict
from conformance.reference.forward import expected_forward
from conformance.reference.grad import expected_grad
from conformance.specload import spec_hash

# (spec path of the choice, key under which its alternatives are listed), relative to the spec root.
CHOICE_POINTS = (
    ("pointwise.conventions.target_zero.choice", "pointwise.conventions.target_zero.choices"),
    ("pointwise.conventions.target_negative.choice", "pointwise.conventions.target_negative.choices"),
    ("pointwise.conventions.log_target_neg_inf.choice", "pointwise.conventions.log_target_neg_inf.choices"),
    ("pointwise.conventions.infinities.choice", "pointwise.conventions.infinities.choices"),
    ("pointwise.conventions.nan_propagation.choice", "pointwise.conventions.nan_propagation.choices"),
    ("reductions.mean.empty", "reductions.mean.empties"),
    ("shapes.broadcasting", "shapes.broadcastings"),
    ("dtypes.mixed", "dtypes.mixeds"),
    ("gradients.conventions.target_zero.choice", "gradients.conventions.target_zero.choices"),
    ("gradients.conventions.target_negative.choice", "gradients.conventions.target_negative.choices"),
    ("gradients.conventions.log_target_neg_inf.choice", "gradients.conventions.log_target_neg_inf.choices"),
    ("gradients.conventions.nan_propagation.choice", "gradients.conventions.nan_propagation.choices"),
    ("reductions.batchmean.divisor", "reductions.batchmean.divisors"),
    ("signature.legacy.precedence", "signature.legacy.precedences"),
)


@dataclass(frozen=True)
class Alternative:
    """One departure from the spec: the value at `path` set to `choice`."""

    path: str
    choice: str

    def __str__(self) -> str:
        return f"{self.path.removesuffix('.choice')} = {self.choice}"


def alternatives(spec: Spec) -> list[Alternative]:
    """Every single departure the spec allows the reference to compute."""
    found = []
    for path, choices_path in CHOICE_POINTS:
        current = get_path(spec.data, path)
        found += [Alternative(path, c) for c in get_path(spec.data, choices_path) if c != current]
    return found


def with_alternatives(spec: Spec, alts: tuple[Alternative, ...]) -> Spec:
    """A copy of `spec` with the given choices changed."""
    data = copy.deepcopy(dict(spec.data))
    for alt in alts:
        set_path(data, alt.path, alt.choice)
    return Spec(data=data, source=f"{spec.source} with {', '.join(map(str, alts))}", hash=spec_hash(data))


def explain(case: Case, observed: Observation, spec: Spec, part: str = "forward",
            max_combined: int = 2) -> tuple[Alternative, ...] | None:
    """The smallest set of alternative choices under which `observed` passes, or None.

    An observation that raised is explained by a choice under which the spec
    expects an error at all, whatever its exception type.
    """
    if observed.unsupported is not None:
        return None
    expect = expected_forward if part == "forward" else (lambda c, s: expected_grad(c, s, part))
    if observed.raised and expect(case, spec).error_id is not None:
        return None  # an error was due anyway: only its type differs, which no choice explains
    for alts, alt_spec in _candidate_sets(spec, max_combined):
        expected = expect(case, alt_spec)
        if observed.raised:
            if expected.error_id is not None:
                return alts
        elif classify(expected, observed, spec).verdict is Verdict.PASS:
            return alts
    return None


def _candidate_sets(spec: Spec, max_combined: int) -> Iterator[tuple[tuple[Alternative, ...], Spec]]:
    """Each set of alternatives with its modified spec, smallest sets first (built once per spec)."""
    key = (spec.hash, max_combined)
    if key not in _CANDIDATES:
        singles = alternatives(spec)
        _CANDIDATES[key] = [(combo, with_alternatives(spec, combo))
                            for size in range(1, max_combined + 1)
                            for combo in itertools.combinations(singles, size)
                            if len({a.path for a in combo}) == size]
    return iter(_CANDIDATES[key])


_CANDIDATES: dict[tuple[str, int], list[tuple[tuple[Alternative, ...], Spec]]] = {}


def get_path(data, dotted: str):
    """The value at a dotted spec path, e.g. ``get_path(data, "reductions.batchmean.divisor")``."""
    node = data
    for key in dotted.split("."):
        node = node[key]
    return node


def set_path(data, dotted: str, value) -> None:
    """Set the value at a dotted spec path, in place."""
    *parents, leaf = dotted.split(".")
    (get_path(data, ".".join(parents)) if parents else data)[leaf] = value
