"""The generated suites' keys: which cases each suite holds (the spec's parameter grid x shapes x dtypes x value
families), each a CaseKey, without drawing a value.

The default suite is a pairwise covering design over all factors (every pair of
levels appears in some case), plus every edge family in full over reduction x
log_target x dtype, a well-posed sweep, and the error cases. `exhaustive` yields
the whole cartesian product; `modes` every family, dtype and reduction once, and
`mode-slice` the signatures of it that mode_slice.txt lists. Which ids exist depends
on the spec alone (the pairwise design is drawn with the fixed DESIGN_SEED), never on `--seed`.

Never imports a framework or the reference, and draws no values (cases/generate.py does).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from conformance.cases.families import EDGE, FAMILIES, WELL_POSED
from conformance.cases.ids import CaseKey, build_id, signature
from conformance.core.case import NUMPY_DEFAULT, Construction, DtypePair, Params
from conformance.core.model import Spec

# The pairwise design's own seed: fixed, so the suite's ids never depend on --seed (ids are API).
DESIGN_SEED = 20261122
FULL_SHAPE = (4, 6)  # the shape edge families and sweeps run on: a batch of 4 distributions over 6 classes


@dataclass(frozen=True)
class ShapeLevel:
    """One level of the shape factor: input shape, target shape and memory layout."""

    input: tuple[int, ...]
    target: tuple[int, ...]
    layout: str = "contiguous"


SHAPES = (
    ShapeLevel((), ()),                       # 0-d
    ShapeLevel((7,), (7,)),                   # 1-d: one distribution
    ShapeLevel((4, 6), (4, 6)),               # 2-d batch
    ShapeLevel((2, 3, 2, 4), (2, 3, 2, 4)),   # 4-d
    ShapeLevel((0, 5), (0, 5)),               # empty batch
    ShapeLevel((3, 0), (3, 0)),               # empty distributions
    ShapeLevel((4, 6), (6,)),                 # target broadcast over the batch
    ShapeLevel((6,), (4, 6)),                 # input broadcast over the batch
    ShapeLevel((1, 6), (4, 6)),               # size-1 batch dimension broadcast
    ShapeLevel((4, 6), (4, 6), "transposed"),
    ShapeLevel((4, 6), (4, 6), "strided"),
)
FULL_SHAPE_LEVEL = ShapeLevel(FULL_SHAPE, FULL_SHAPE)

# Error cases (spec: errors): one fault each.
BAD_REDUCTIONS = ("avg", "elementwise_mean", "SUM")
# Besides each rejected dtype with itself (spec: dtypes.rejected), a rejected dtype beside a floating one.
MIXED_BAD_DTYPES = (DtypePair("float32", "int64"), DtypePair("int32", "float32"))
BAD_SHAPES = (ShapeLevel((4, 6), (4, 5)), ShapeLevel((3,), (4,)))


def parameter_levels(spec: Spec) -> dict[str, list[Any]]:
    """The factor levels the spec defines: reductions, log_target, legacy pairs, dtypes."""
    legacy = [(None, None)] + [(row["size_average"], row["reduce"]) for row in spec.data["signature"]["legacy"]["mapping"]]
    dtypes = [DtypePair(d, d) for d in spec.floating_dtypes]
    dtypes += [DtypePair(row["input"], row["target"]) for row in spec.data["dtypes"]["promotion"]
               if row["input"] in spec.floating_dtypes and row["target"] in spec.floating_dtypes]
    return {
        "reduction": list(spec.reductions),
        "log_target": list(spec.data["signature"]["parameters"]["log_target"]["values"]),
        "legacy": legacy,
        "shape": list(SHAPES),
        "dtype": dtypes,
        "family": list(FAMILIES),
    }


def _is_valid(assignment: dict[str, Any]) -> bool:
    """Constraints between factor levels: a family's supported log_target values."""
    family, log_target = assignment.get("family"), assignment.get("log_target")
    return family is None or log_target is None or log_target in FAMILIES[family].log_targets


def pairwise_design(levels: dict[str, Sequence[Any]], rng: np.random.Generator) -> list[dict[str, Any]]:
    """A greedy (AETG-style) covering array of strength 2: every valid pair of levels appears.

    Deterministic for a given `rng` state.
    """
    names = list(levels)
    index = {name: list(range(len(levels[name]))) for name in names}
    uncovered = {
        ((a, i), (b, j))
        for ai, a in enumerate(names) for b in names[ai + 1:]
        for i in index[a] for j in index[b]
        if _is_valid({a: levels[a][i], b: levels[b][j]})
    }
    rows = []
    while uncovered:
        (a, i), (b, j) = min(uncovered)
        row = {a: i, b: j}
        rest = [n for n in names if n not in row]
        rng.shuffle(rest)
        for name in rest:
            def gain(k: int) -> int:
                return sum(((name, k), (other, row[other])) in uncovered or ((other, row[other]), (name, k)) in uncovered
                           for other in row)
            candidates = [k for k in index[name]
                          if _is_valid({**{n: levels[n][v] for n, v in row.items()}, name: levels[name][k]})]
            row[name] = max(candidates, key=lambda k: (gain(k), -k))
        for x, y in itertools.combinations(names, 2):
            uncovered.discard(((x, row[x]), (y, row[y])))
        rows.append({n: levels[n][row[n]] for n in names})
    return rows


def _key(reduction, log_target, legacy, shape: ShapeLevel, dtype: DtypePair, family: str,
         prob_input: bool = False, construction: Construction = NUMPY_DEFAULT) -> CaseKey:
    size_average, reduce = legacy
    return CaseKey(Params(reduction, log_target, size_average, reduce, prob_input), shape.input, shape.target,
                   shape.layout, dtype, family, construction=construction)


def default_keys(spec: Spec) -> Iterator[CaseKey]:
    """Keys of the default suite: pairwise design, edge families in full, well-posed sweep, errors.

    The same for every --seed: the design is drawn with DESIGN_SEED.
    """
    levels = parameter_levels(spec)
    for row in pairwise_design(levels, np.random.default_rng(DESIGN_SEED)):
        yield _key(row["reduction"], row["log_target"], row["legacy"], row["shape"], row["dtype"], row["family"])
    same_dtypes = [d for d in levels["dtype"] if not d.is_mixed]
    for family in EDGE + WELL_POSED:
        for reduction, log_target, dtype in itertools.product(levels["reduction"], levels["log_target"], same_dtypes):
            if log_target in FAMILIES[family].log_targets:
                yield _key(reduction, log_target, (None, None), FULL_SHAPE_LEVEL, dtype, family)
    yield from probability_keys(spec, levels)
    yield from error_keys(spec)
    yield from log_target_keys(spec, levels)
    yield from swapped_dtype_keys(spec)
    yield from construction_keys(spec)


# The families a swapped dtype pair is run on: where computing in the narrower argument's dtype instead of the
# promoted one shows (rounding of ordinary values, underflow, overflow). The special values of the other edge
# families (0, 1, +-inf, NaN, negatives) are the same in every floating dtype.
SWAPPED_FAMILIES = ("softmax", "unnormalized", "tiny", "large")
# Elementwise, each term is judged on its own; summed, on the reduction's bound.
SWAPPED_REDUCTIONS = ("none", "sum")


def swapped_pairs(spec: Spec) -> list[DtypePair]:
    """Each mixed pair of spec: dtypes.promotion in the order its row does not spell (the table is written
    with the narrower dtype as input; spec: dtypes.precision says a row holds in both): a wide input with a narrow
    target, as pytorch#117034's float32 input with a float16 target."""
    floating = spec.floating_dtypes
    return [DtypePair(row["target"], row["input"]) for row in spec.data["dtypes"]["promotion"]
            if row["input"] in floating and row["target"] in floating]


def swapped_dtype_keys(spec: Spec) -> Iterator[CaseKey]:
    """The swapped pairs (`swapped_pairs`) on the families where promotion matters, in full over log_target and
    two reductions, on the full shape. The pairwise design keeps its dtype levels (the rows' own order), so the
    ids it draws stay those of earlier releases."""
    for dtype in swapped_pairs(spec):
        for family in SWAPPED_FAMILIES:
            for log_target, reduction in itertools.product(FAMILIES[family].log_targets, SWAPPED_REDUCTIONS):
                yield _key(reduction, log_target, (None, None), FULL_SHAPE_LEVEL, dtype, family)


# The construction cases (`construction_keys`): shapes where how a tensor is made can change what it holds: a batch
# of values, a 0-d tensor (a bare Python float, a scalar fill) and an empty one a nested list can state (a list
# cannot state (0, 5): [] is 1-d). A fill factory makes one value, so it has only the 0-d and the empty shape.
EMPTY_LIST_SHAPE = ShapeLevel((3, 0), (3, 0))
CONSTRUCTION_SHAPES = {
    "numpy": (FULL_SHAPE_LEVEL, ShapeLevel((), ()), EMPTY_LIST_SHAPE),
    "list": (FULL_SHAPE_LEVEL, ShapeLevel((), ()), EMPTY_LIST_SHAPE),
    "factory": (ShapeLevel((), ()), EMPTY_LIST_SHAPE),
}
NUMPY_FLOATS = ("float16", "float32", "float64")  # the floating dtypes a NumPy array can hold (no bfloat16)
# families.py draw_certain: the input at full precision in every element, a certain target; the loss is -input
# exactly, so a framework's float64 exp or log that is less accurate than float64 (MLX's) cannot hide the input's
# construction. Outside FAMILIES, as "pinned" is: the default suite's pairwise design does not change.
CONSTRUCTION_FAMILY = "certain"


def construction_keys(spec: Spec) -> Iterator[CaseKey]:
    """The cases of every way a tensor is made (issue 30), on the values where it can matter, not across the suite.

    With the dtype given: a nested list and a fill factory, in every floating dtype but the one the spec says
    Python floats are inferred as (dtypes.inferred.python_float: float32, what the NumPy cases already cover
    most), so float64 and the half-precision dtypes. With the dtype inferred: a list and a factory in that
    inferred dtype, and a NumPy array of each dtype NumPy holds (dtypes.inferred.numpy_array: the array's own).
    Each in log space and in linear space, and with probabilities as input where a dialect takes those; the
    reduction `none` (every element judged) where the tensor has elements, `sum` on the empty one.
    """
    python_float = spec.data["dtypes"]["inferred"]["python_float"]["choice"]
    explicit = [d for d in spec.floating_dtypes if d != python_float]
    builds = [(Construction(source), dtype) for source in ("list", "factory") for dtype in explicit]
    builds += [(Construction(source, inferred=True), python_float) for source in ("list", "factory")]
    builds += [(Construction("numpy", inferred=True), d) for d in NUMPY_FLOATS if d in spec.floating_dtypes]
    spaces = [(False, False), (True, False)]
    if any(d["input_space"] == "probability" for d in spec.data["dialects"].values()):
        spaces.append((False, True))
    for (log_target, prob_input), (construction, dtype) in itertools.product(spaces, builds):
        for shape in CONSTRUCTION_SHAPES[construction.source]:
            reduction = "sum" if 0 in shape.input else "none"
            yield _key(reduction, log_target, (None, None), shape, DtypePair(dtype, dtype), CONSTRUCTION_FAMILY,
                       prob_input=prob_input, construction=construction)


def probability_keys(spec: Spec, levels: dict[str, list[Any]]) -> Iterator[CaseKey]:
    """Cases whose input holds probabilities q, for the APIs of a probability-space dialect (spec:
    dialects.keras): every family in full over reduction x dtype, and every shape with softmax values.
    A family's log-space draw of the input is exponentiated (log q = -inf gives q = 0)."""
    if not any(d["input_space"] == "probability" for d in spec.data["dialects"].values()):
        return
    same_dtypes = [d for d in levels["dtype"] if not d.is_mixed]
    for family in EDGE + WELL_POSED:
        for reduction, dtype in itertools.product(levels["reduction"], same_dtypes):
            yield _key(reduction, False, (None, None), FULL_SHAPE_LEVEL, dtype, family, prob_input=True)
    for shape, reduction in itertools.product(levels["shape"], levels["reduction"]):
        yield _key(reduction, False, (None, None), shape, DtypePair("float32", "float32"), "softmax", prob_input=True)
    for dtype in [d for d in levels["dtype"] if d.is_mixed] + swapped_pairs(spec):
        yield _key("sum", False, (None, None), FULL_SHAPE_LEVEL, dtype, "softmax", prob_input=True)


def log_target_keys(spec: Spec, levels: dict[str, list[Any]]) -> Iterator[CaseKey]:
    """Every shape and every mixed dtype pair (in both orders) with softmax values, and every error case, with a
    log-space target and no legacy argument: what an API that takes log-probability targets only (MLX's
    kl_div_loss) can express. The pairwise design meets most of them in log space only beside a legacy argument."""
    for shape, reduction in itertools.product(levels["shape"], levels["reduction"]):
        yield _key(reduction, True, (None, None), shape, DtypePair("float32", "float32"), "softmax")
    for dtype in [d for d in levels["dtype"] if d.is_mixed] + swapped_pairs(spec):
        yield _key("sum", True, (None, None), FULL_SHAPE_LEVEL, dtype, "softmax")
    yield from error_keys(spec, log_target=True)


def error_keys(spec: Spec, log_target: bool = False) -> Iterator[CaseKey]:
    """One case per fault the spec names under `errors`."""
    ok = DtypePair("float32", "float32")
    for reduction in BAD_REDUCTIONS:
        yield _key(reduction, log_target, (None, None), FULL_SHAPE_LEVEL, ok, "softmax")
    rejected = spec.rejected_dtypes
    bad = [DtypePair(d, d) for d in rejected] + [p for p in MIXED_BAD_DTYPES if {p.input, p.target} & set(rejected)]
    for dtype in bad:
        for reduction in ("none", "sum"):
            yield _key(reduction, log_target, (None, None), FULL_SHAPE_LEVEL, dtype, "integers")
    for shape in BAD_SHAPES:
        yield _key("sum", log_target, (None, None), shape, ok, "softmax")


# The mode suite's pinned cases (family "pinned", drawn by cases/families.py PINNED): values where a compiled
# mode that keeps narrow intermediates in float32 answers otherwise than eager (issue 29's Inductor findings).
PINNED_KEYS = (
    # float16 `mean` with x = -60000, t = 5 in one class of six: that term overflows float16, the mean does not
    (("mean", False), DtypePair("float16", "float16")),
    # a float32 input against a float16 log-space target t = 80: exp(80) overflows float16, not float32
    (("sum", True), DtypePair("float32", "float16")),
)


def mode_keys(spec: Spec) -> Iterator[CaseKey]:
    """Keys of the mode suite (`--suite modes`): what a compiled or graph mode is run on, where every new
    signature (shape, dtypes, parameters) costs a compile.

    Every (family, dtype pair, reduction) the default suite has, in each input space it has it in, once, on
    the full shape, log_target alternating between the families; then every shape level and every legacy
    pair once (float32 softmax values), the error cases, and the pinned cases. Whatever the default suite
    checks of one family, dtype and reduction is here; what it loses is only the product with every shape,
    and the construction cases: a tensor is made before any compiled call, which a mode does not change.
    """
    levels = parameter_levels(spec)
    covered: dict[tuple, None] = {}
    for key in default_keys(spec):
        if key.family in FAMILIES:  # error cases follow, as in the default suite
            covered.setdefault((key.family, key.dtype, key.params.reduction, key.params.prob_input), None)
    families, dtypes = list(FAMILIES), levels["dtype"] + swapped_pairs(spec)
    for family, dtype, reduction, prob_input in covered:
        if reduction not in levels["reduction"]:
            continue
        allowed = [False] if prob_input else list(FAMILIES[family].log_targets)
        turn = families.index(family) + dtypes.index(dtype) + levels["reduction"].index(reduction)
        yield _key(reduction, allowed[turn % len(allowed)], (None, None), FULL_SHAPE_LEVEL, dtype, family,
                   prob_input=prob_input)
    f32 = DtypePair("float32", "float32")
    for i, shape in enumerate(levels["shape"]):
        yield _key(levels["reduction"][i % len(levels["reduction"])], bool(i % 2), (None, None), shape, f32,
                   "softmax")
    for legacy in levels["legacy"][1:]:
        yield _key("mean", False, legacy, FULL_SHAPE_LEVEL, f32, "softmax")
    yield from error_keys(spec)
    yield from error_keys(spec, log_target=True)  # what an API of log-space targets only can express
    for (reduction, log_target), dtype in PINNED_KEYS:
        yield _key(reduction, log_target, (None, None), FULL_SHAPE_LEVEL, dtype, "pinned")


MODE_SLICE = Path(__file__).with_name("mode_slice.txt")  # the mode slice's signatures, written by scripts/mode_slice.py


def mode_slice_keys(spec: Spec) -> Iterator[CaseKey]:
    """Keys of the mode slice (`--suite mode-slice`): the mode suite's cases of the signatures `mode_slice.txt` lists.

    A compiled mode pays one compile per signature, whatever values the cases of it hold, so the slice keeps
    whole signatures, every family of each. They were chosen (scripts/mode_slice.py) from recorded runs of every
    framework's modes over the whole mode suite: each finding those runs showed, in each mode, shows in one of them,
    and every floating dtype and every (reduction, log_target) the spec names is in one (tests/cases/test_mode_slice.py
    checks both).
    """
    chosen = mode_slice_signatures()
    return (key for key in mode_keys(spec) if signature(build_id(key)) in chosen)


def mode_slice_signatures() -> frozenset[str]:
    """The signatures `mode_slice.txt` lists, one a line (text after `#` is a comment)."""
    lines = MODE_SLICE.read_text(encoding="utf-8").splitlines()
    return frozenset(s for s in (line.split("#", 1)[0].strip() for line in lines) if s)


def exhaustive_keys(spec: Spec) -> Iterator[CaseKey]:
    """Every valid combination of every factor level, mixed dtypes in both orders, then the error cases."""
    levels = parameter_levels(spec)
    levels["dtype"] = levels["dtype"] + swapped_pairs(spec)
    names = list(levels)
    for combo in itertools.product(*(levels[n] for n in names)):
        row = dict(zip(names, combo))
        if _is_valid(row):
            yield _key(row["reduction"], row["log_target"], row["legacy"], row["shape"], row["dtype"], row["family"])
    yield from error_keys(spec)
    yield from error_keys(spec, log_target=True)
    yield from construction_keys(spec)
