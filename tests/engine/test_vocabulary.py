"""The spec states its vocabulary once: the code's tables of spec paths either walk the spec or are
literals checked against it here (a literal where its order is stored, as rule codes are)."""

from __future__ import annotations

import pytest

from conformance.core.choices import TOUCHES, choice_points, get_path
from conformance.core.formula import VARIABLES, _expand
from conformance.core.model import RULE_NAMES
from conformance.judge.cacheentry import _RULE_NAMES as CACHE_DICTIONARY_NAMES
from conformance.reference import forward, grad


def _exists(spec, dotted: str) -> bool:
    try:
        get_path(spec.data, dotted)
    except (KeyError, TypeError):
        return False
    return True


def test_forward_rule_codes_are_the_specs_pointwise_conventions_in_order(spec):
    """Expected.rule_map stores codes, so the order is a literal: the spec's conventions in their order."""
    conventions = [f"pointwise.conventions.{name}" for name in spec.data["pointwise"]["conventions"]]
    assert list(RULE_NAMES[1:1 + len(conventions)]) == conventions
    assert RULE_NAMES[0] == "pointwise.formula"
    assert all(_exists(spec, path) for path in RULE_NAMES[1:])


def test_gradient_rule_codes_are_the_specs_gradient_conventions_in_order(spec):
    conventions = [f"gradients.conventions.{name}" for name in spec.data["gradients"]["conventions"]]
    assert list(grad.RULES) == ["gradients.formula"] + conventions
    assert all(_exists(spec, path) for path in grad.RULE_NAMES[1:])


@pytest.mark.parametrize("pattern", sorted(VARIABLES))
def test_every_formula_field_the_harness_names_is_in_the_spec(spec, pattern):
    assert list(_expand(spec.data, pattern.split("."), "")), f"formula.VARIABLES names {pattern}, not in the spec"


def test_every_rule_a_cause_names_is_a_spec_path(spec):
    """The rules a verdict states by itself and those the fault patterns break are spec paths."""
    stated = {"shapes.output", "dtypes.promotion", "dtypes.precision", "gradients.upstream",
              *(f"reductions.{r}.divisor" for r in ("mean", "batchmean"))}
    assert [p for p in stated if not _exists(spec, p)] == []


def test_refcache_dictionary_names_are_spec_paths(spec):
    """The deflate dictionary only compresses; a stale name would cost bytes, not correctness."""
    known = set(RULE_NAMES) | set(grad.RULE_NAMES) | {f"errors.{row['id']}" for row in spec.data["errors"]}
    assert [p for p in CACHE_DICTIONARY_NAMES if p not in known and not _exists(spec, p)] == []


@pytest.mark.parametrize("field, computed", [("divisor", forward.DIVISORS), ("empty", forward.EMPTY_VALUES)])
def test_every_divisor_and_empty_value_the_spec_names_is_one_the_reference_computes(spec, field, computed):
    for name, rule in spec.data["reductions"].items():
        if isinstance(rule, dict) and field in rule:
            node = rule[field]
            named = list(node["choices"]) if isinstance(node, dict) else [node]
            assert set(named) <= set(computed), f"reductions.{name}.{field}"


def test_touches_are_keyed_by_the_specs_choice_points(spec):
    assert set(TOUCHES) == set(choice_points(spec.data))
