"""The deterministic case generator: a suite's keys (cases/suites.py), each id once, drawn into cases.

Values depend only on (seed, case id), never on the order or the company a case is generated in;
which ids exist depends on the spec alone (cases/suites.py), so `--seed` draws other values for the
same ids. Cases are produced lazily.

Never imports a framework or the reference.
"""

from __future__ import annotations

import zlib
from typing import Iterator

import numpy as np

from conformance.cases import rounded_math
from conformance.cases.families import FAMILIES, draw_certain, draw_integers, draw_pinned
from conformance.cases.ids import CaseKey, build_id
from conformance.cases.suites import (BAD_REDUCTIONS, BAD_SHAPES, CONSTRUCTION_FAMILY, FULL_SHAPE, NUMPY_FLOATS,
                                      PINNED_KEYS, ShapeLevel, default_keys, exhaustive_keys, mode_keys,
                                      mode_slice_keys)
from conformance.core.case import Case
from conformance.core.model import FLOAT_DTYPES, PARTS, Spec
from conformance.core.rounding import INTEGER_DTYPES, round_to_dtype

DEFAULT_SEED = 20261122


def generate_cases(spec: Spec, seed: int = DEFAULT_SEED, exhaustive: bool = False, samples: int = 1) -> Iterator[Case]:
    """The generated suite, lazily, without duplicate ids; `samples` draws of each combination."""
    for _, key in generated_keys(spec, exhaustive, samples):
        yield build_case(key, seed)


def generated_keys(spec: Spec, exhaustive: bool = False, samples: int = 1,
                   suite: str | None = None) -> Iterator[tuple[str, CaseKey]]:
    """The id and key of each case of the generated suite, in `generate_cases`' order, drawing no values
    (counting a suite of 150,000 cases then takes no longer than listing their ids). `suite` ("default",
    "exhaustive", "modes" or "mode-slice") overrides `exhaustive`."""
    suite = suite or ("exhaustive" if exhaustive else "default")
    seen: set[str] = set()
    keys = {"exhaustive": exhaustive_keys, "modes": mode_keys, "mode-slice": mode_slice_keys}.get(suite, default_keys)
    for key in keys(spec):
        # the id is built once per key: only its last field, the sample, changes (ids.build_id's format)
        stem = build_id(key).removesuffix(f"s{key.sample}")
        for sample in range(samples):
            case_id = f"{stem}s{sample}"
            if case_id in seen:
                continue
            seen.add(case_id)
            yield case_id, (key if sample == key.sample else CaseKey(key.params, key.input_shape, key.target_shape,
                                                                     key.layout, key.dtype, key.family, sample,
                                                                     key.construction))


def case_rng(seed: int, case_id: str) -> np.random.Generator:
    """The RNG of one case: a function of (seed, id) alone."""
    return np.random.default_rng([seed, zlib.crc32(case_id.encode("utf-8"))])


def check_key(key: CaseKey, spec: Spec | None = None) -> None:
    """Refuse a key no generator draws (an id typed by hand): ValueError naming the field.

    Raises
    ------
    ValueError
        for an unknown family or dtype, a layout the shape cannot have, a log_target
        the family does not draw, or a construction the case cannot have (with `spec`, an inferred
        dtype other than the one spec: dtypes.inferred names).
    """
    _check_construction(key, spec)
    if key.family == "pinned":
        if (key.input_shape, key.target_shape, key.layout) != (FULL_SHAPE, FULL_SHAPE, "contiguous") or \
                ((key.params.reduction, key.params.log_target), key.dtype) not in PINNED_KEYS:
            raise ValueError("family 'pinned' has only the mode suite's cases; list them with "
                             "`kl-conformance cases --suite modes --family pinned`")
    elif key.family == CONSTRUCTION_FAMILY:
        if key.construction.is_default:
            raise ValueError(f"family {CONSTRUCTION_FAMILY!r} has only the construction cases (DTYPE,from=...); list "
                             f"them with `kl-conformance cases --family {CONSTRUCTION_FAMILY}`")
    elif key.family != "integers" and key.family not in FAMILIES:
        raise ValueError(f"unknown family {key.family!r}; use one of "
                         f"{sorted(FAMILIES) + ['integers', 'pinned', CONSTRUCTION_FAMILY]}")
    for name in (key.dtype.input, key.dtype.target):
        if name not in FLOAT_DTYPES + INTEGER_DTYPES:
            raise ValueError(f"unknown dtype {name!r}; use one of {list(FLOAT_DTYPES + INTEGER_DTYPES)}")
    least = {"transposed": 2, "strided": 1}.get(key.layout, 0)
    if min(len(key.input_shape), len(key.target_shape)) < least:
        raise ValueError(f"layout {key.layout!r} needs tensors of at least {least} dimensions")
    if key.family in FAMILIES and key.params.log_target not in FAMILIES[key.family].log_targets:
        raise ValueError(f"family {key.family!r} has no log_target={int(key.params.log_target)} cases")


def _check_construction(key: CaseKey, spec: Spec | None) -> None:
    """A construction other than the default needs one floating dtype of a drawn family, a contiguous layout, a
    shape the source can state (a fill factory: one value, so 0-d or empty), and an inferred dtype the source
    infers."""
    c = key.construction
    if c.is_default:
        return
    if key.family != CONSTRUCTION_FAMILY or key.dtype.is_mixed or key.dtype.input not in FLOAT_DTYPES:
        raise ValueError(f"construction {c} needs one floating dtype and family {CONSTRUCTION_FAMILY!r}, "
                         f"not {key.dtype} {key.family}")
    if key.layout != "contiguous":
        raise ValueError(f"construction {c} makes contiguous tensors only, not {key.layout}")
    if c.source == "factory" and key.input_shape and 0 not in key.input_shape:
        raise ValueError("from=factory fills a tensor with one value: only 0-d (scalar) or empty shapes")
    if c.source == "numpy" and c.inferred and key.dtype.input not in NUMPY_FLOATS:
        raise ValueError(f"NumPy has no {key.dtype.input}: from=numpy,inferred takes one of {list(NUMPY_FLOATS)}")
    if c.source != "numpy" and c.inferred and spec is not None:
        inferred = spec.data["dtypes"]["inferred"]["python_float"]["choice"]
        if key.dtype.input != inferred:
            raise ValueError(f"from={c.source},inferred makes {inferred} (spec: dtypes.inferred.python_float), "
                             f"not {key.dtype.input}")


def build_case(key: CaseKey, seed: int) -> Case:
    """Draw the values of `key` and round them to its dtypes."""
    case_id = build_id(key)
    rng = case_rng(seed, case_id)
    if key.family == "integers":
        x, t = draw_integers(rng, key.input_shape, key.target_shape)
    elif key.family == "pinned":
        x, t = draw_pinned(key.input_shape, key.params.log_target)
    elif key.family == CONSTRUCTION_FAMILY:
        x, t = draw_certain(rng, key.input_shape, key.target_shape, key.params.log_target)
    else:
        x, t = FAMILIES[key.family].draw(rng, key.input_shape, key.target_shape, key.params.log_target)
    if key.params.prob_input:  # the family draws log q; the case holds q
        x = rounded_math.exp(x)
    return Case(
        id=case_id, params=key.params,
        input=round_to_dtype(np.asarray(x, dtype=np.float64), key.dtype.input),
        target=round_to_dtype(np.asarray(t, dtype=np.float64), key.dtype.target),
        dtype=key.dtype, family=key.family, layout=key.layout, parts=parts_of(key), construction=key.construction,
    )


def parts_of(key: CaseKey) -> tuple[str, ...]:
    """Every part for a case that should compute; the forward call alone for an error case."""
    is_error = (key.family == "integers" or key.params.reduction in BAD_REDUCTIONS
                or ShapeLevel(key.input_shape, key.target_shape) in BAD_SHAPES)
    return ("forward",) if is_error else PARTS
