"""The types that flow through the harness around the case: Spec -> (Case) -> Expected -> Observation -> Judgement
-> Result, and the Target every row is scoped by. The case's own types are in core/case.py.

Also the vocabulary they share: the floating dtypes and their formats, the parts, the upstream gradient and the
spec's rule names. Depends only on the standard library, NumPy and core/verdict.py (the verdicts, which this
module names too); never on the project above the core.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from conformance.core.verdict import Verdict  # the verdicts and what each means (one table)

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# (significand bits including the implicit one, smallest normal exponent, largest finite value) of each
# floating format: IEEE 754 binary16/32/64, and bfloat16 (float32's range with 8 significand bits).
FLOAT_FORMATS = {
    "float16": (11, -14, 65504.0),
    "bfloat16": (8, -126, float.fromhex("0x1.fep127")),
    "float32": (24, -126, float.fromhex("0x1.fffffep127")),
    "float64": (53, -1022, float.fromhex("0x1.fffffffffffffp1023")),
}
PARTS = ("forward", "grad_input", "grad_target", "grad2_input")
# the argument each gradient part is differentiated with respect to (grad2_input: d/dtarget of grad_input)
GRAD_PARTS = {"grad_input": "input", "grad_target": "target", "grad2_input": "target"}


# The gradient flowing into the loss: base + step * (i mod period), or REDUCED for a 0-d result.
# Adapters and reproducers apply it without the spec, so the spec loader checks that
# spec: gradients.upstream states exactly these numbers.
UPSTREAM = {"none": {"base": 0.75, "step": 0.125, "period": 5}, "reduced": 1.25}


def upstream_gradient(shape: tuple[int, ...]) -> np.ndarray:
    """The gradient flowing into the loss (spec: gradients.upstream): 1.25 for a scalar result,
    else 0.75 + 0.125 * (i mod 5) over the elements in C order. Every value is exact in every dtype.

    Is equivalent to ``np.array([0.75, 0.875, 1.0, 1.125, 1.25, 0.75, ...]).reshape(shape)``.
    """
    if shape == ():
        return np.asarray(UPSTREAM["reduced"])
    n = int(np.prod(shape))
    pattern = UPSTREAM["none"]
    return (pattern["base"] + pattern["step"] * (np.arange(n) % pattern["period"])).reshape(shape)

# Spec paths of the pointwise rules, indexed by the codes in Expected.rule_map.
RULE_NAMES = (
    "pointwise.formula",
    "pointwise.conventions.target_zero",
    "pointwise.conventions.target_negative",
    "pointwise.conventions.log_target_neg_inf",
    "pointwise.conventions.nan_propagation",
    "pointwise.conventions.infinities",
    "dialects.keras.clip",
    "dialects.keras.ratio",
)


def spec_hash(data: Any) -> str:
    """Hash of the spec's meaning: canonical JSON, so comments and layout do not count."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Spec:
    """The validated spec document, with the lookups the harness needs."""

    data: Mapping[str, Any] = field(repr=False)
    source: str
    hash: str

    def convention(self, name: str) -> str:
        return self.data["pointwise"]["conventions"][name]["choice"]

    @property
    def reductions(self) -> tuple[str, ...]:
        return tuple(self.data["signature"]["parameters"]["reduction"]["values"])

    @property
    def floating_dtypes(self) -> tuple[str, ...]:
        return tuple(self.data["dtypes"]["floating"])

    @property
    def rejected_dtypes(self) -> tuple[str, ...]:
        return tuple(self.data["dtypes"]["rejected"])

    def unit_roundoff(self, dtype: str) -> float:
        return float(self.data["dtypes"]["unit_roundoff"][dtype])

    def smallest_subnormal(self, dtype: str) -> float:
        return float(self.data["dtypes"]["smallest_subnormal"][dtype])

    def result_dtype(self, input_dtype: str, target_dtype: str) -> str:
        """Promoted floating dtype of a call (spec: dtypes.promotion)."""
        if input_dtype == target_dtype:
            return input_dtype
        for row in self.data["dtypes"]["promotion"]:
            if {row["input"], row["target"]} == {input_dtype, target_dtype}:
                return row["result"]
        raise KeyError(f"spec: dtypes.promotion has no row for {input_dtype!r} with {target_dtype!r}")

    def dialect(self, name: str) -> Mapping[str, Any]:
        """The rules of one dialect (spec: dialects), e.g. its input space and whether it sums over the last axis."""
        return self.data["dialects"][name]

    def legacy_reduction(self, size_average: bool | None, reduce: bool | None) -> str:
        """Reduction named by the deprecated pair (spec: signature.legacy.mapping)."""
        for row in self.data["signature"]["legacy"]["mapping"]:
            if row["size_average"] == size_average and row["reduce"] == reduce:
                return row["reduction"]
        raise KeyError(f"spec: signature.legacy.mapping has no row for size_average={size_average!r}, reduce={reduce!r}")

    def error_exception(self, error_id: str) -> str:
        return self._error(error_id)["exception"]

    def error_match(self, error_id: str) -> str | None:
        """The pattern the exception's message must contain (spec: errors[].match), or None for any."""
        return self._error(error_id).get("match")

    def _error(self, error_id: str) -> Mapping[str, Any]:
        for row in self.data["errors"]:
            if row["id"] == error_id:
                return row
        raise KeyError(f"spec: errors has no entry {error_id!r}")

    @property
    def error_order(self) -> tuple[str, ...]:
        return tuple(row["id"] for row in self.data["errors"])


@dataclass(frozen=True, eq=False)
class Expected:
    """What the spec predicts for a case: a value with its bound, or an error.

    `value` and `bound` are float64 arrays in the result shape; `rules` names the
    spec paths that shaped the value beyond the plain formula, and `rule_map`
    (for unreduced results) says, per element, which convention applied.
    """

    result_dtype: str | None
    shape: tuple[int, ...] | None = None
    value: np.ndarray | None = field(default=None, repr=False)
    bound: np.ndarray | None = field(default=None, repr=False)
    error_id: str | None = None
    error_type: str | None = None
    error_match: str | None = None  # a regular expression the exception's message must contain
    warnings: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    rule_map: np.ndarray | None = field(default=None, repr=False)
    rule_names: tuple[str, ...] = RULE_NAMES  # what the codes in rule_map stand for
    # the value each element may take instead, within the same bound: a term evaluated in a narrower dtype the
    # second way the spec names (dtypes.argument_terms; core/rounding.py: second_rounding); for a reduced (0-d)
    # value, the candidates, each the sum with one element the other way or with every element computed in float32
    # (every element's own choice would make a window that holds the promoted answer); None where no element may
    alternate: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True, eq=False)
class Observation:
    """What an adapter saw: a value, or an exception, plus warnings and time."""

    value: np.ndarray | None = field(default=None, repr=False)
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    warnings: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    unsupported: str | None = None
    fallback: str | None = None  # the mode's call ran eagerly instead of compiled: why the adapter knows it

    @property
    def raised(self) -> bool:
        return self.exception_type is not None


EAGER = "eager"  # the mode every framework has: each call made as a user types it, nothing compiled


def key_label(key: tuple[str, ...]) -> str:
    """A row's key without its case id, as a report names it: "framework / api / device / part", the mode after
    the device where it is not eager."""
    framework, api, device, mode, part = key[1:]
    return " / ".join([framework, api, device, *([] if mode == EAGER else [mode]), part])


@dataclass(frozen=True)
class Target:
    """Where a case runs: (framework, release, API, device, mode), the key every row, report, merge, baseline,
    known file and profile deviation is scoped by.

    `release` is the framework's version as the run found it (a row's framework_version); `mode` how the call
    is made: eager, or a compiled or graph mode an adapter declares (adapters/declaration.py `Mode`). A row's `key`
    leaves the release out: a baseline compares one call across releases.
    """

    framework: str
    release: str
    api: str
    device: str
    mode: str = EAGER

    def __str__(self) -> str:
        """framework/api/device, and /mode where it is not eager (run.json's targets of eager runs read as before)."""
        return f"{self.framework}/{self.api}/{self.device}" + ("" if self.mode == EAGER else f"/{self.mode}")


UNEXPLAINED = "unexplained"  # the cause of a divergence that no spec choice or fault pattern reproduces
CLAIM = "; behaves as "  # how a divergence's message goes on to state the choices (or fault) that reproduce it
WITHIN = "; within rounding of "  # and, unexplained, the choices its answer lies within rounding of (no cause)
# how an unsupported row's message opens where the harness, not the API, kept the call from running (the memory
# budget, the reference out of memory): nothing of the framework was checked, and no behaviour of it shows
REFUSED = "refused: "


def is_refusal(verdict: Verdict, message: str) -> bool:
    """A row of this verdict and message is a call the harness refused (REFUSED)."""
    return verdict is Verdict.UNSUPPORTED and message.startswith(REFUSED)


def not_refused(reason: str) -> str:
    """An unsupported call's reason as a framework, its adapter or its profile gives it: never read as the
    harness's refusal (REFUSED), whatever its words."""
    return f"unsupported: {reason}" if reason.startswith(REFUSED) else reason


@dataclass(frozen=True)
class Judgement:
    """The comparator's finding for one observation."""

    verdict: Verdict
    message: str = ""
    max_abs_err: float | None = None
    bound: float | None = None
    cause: str = ""
    missing_warnings: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # the spec rules the case touches where it diverges
    where: tuple[int, ...] | None = None  # the element a value or non-finite divergence is shown at
    explained: bool = False  # whether spec alternatives (or a fault pattern) named the cause, not the verdict's rule


# The major version of the files a run writes (results.jsonl rows, run.json, summary.json).
# It changes when a field is removed or renamed or changes meaning; adding a field does not
# change it. Readers refuse another version (spec/results.schema.json says the same).
FORMAT_VERSION = 7
STRICT_JSON = json.JSONEncoder(allow_nan=False)  # JSON without NaN/inf, one encoder: json.dumps(allow_nan=False) builds one per call

RESULT_FIELDS = (
    "case_id", "case_digest", "seed", "family", "reduction", "log_target", "framework", "framework_version", "api",
    "device", "mode", "dtype", "part", "verdict", "documented", "documented_by", "known_by", "max_abs_err", "bound", "cause",
    "rules", "defect", "message", "warnings", "missing_warnings", "elapsed_s", "source", "spec_hash",
    "harness_version", "python_version", "numpy_version", "device_name", "like",
)


@dataclass(frozen=True)
class Result:
    """One row of results.jsonl: a judged (case, framework, api, device, mode, part)."""

    case_id: str
    case_digest: str  # of the case's content (cases/digest.py): one id, one digest in any merge
    seed: int | None  # the run's --seed
    family: str
    reduction: str
    log_target: bool
    framework: str
    framework_version: str
    api: str
    device: str
    mode: str  # how the call was made: eager, or a compiled or graph mode (Target)
    dtype: str
    part: str
    verdict: Verdict
    documented: bool
    documented_by: tuple[str, ...]
    known_by: tuple[str, ...]  # ids of the known-findings entries (--known) that accept this divergence
    max_abs_err: float | None  # |error| of the element worst relative to its bound (largest |error| / bound)
    bound: float | None  # that element's bound: a pass has max_abs_err <= bound, a value divergence more
    cause: str  # what explains a divergence: the spec path(s) it behaves as, or "unexplained"
    rules: tuple[str, ...]  # the spec rules the case touches where it diverges, in the spec's order
    defect: str  # the id of the defect a divergent or unsupported row belongs to (core/defects.py); "" for a pass
    message: str
    warnings: tuple[str, ...]
    missing_warnings: tuple[str, ...]
    elapsed_s: float
    source: str
    spec_hash: str
    harness_version: str
    python_version: str
    numpy_version: str
    device_name: str
    # a port's divergence judged with --like and --like-run: "shared" with the recorded run of the framework it
    # is judged like, or its "own" (report/like.py); None for every other row
    like: str | None = None

    @property
    def target(self) -> Target:
        return Target(self.framework, self.framework_version, self.api, self.device, self.mode)

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        """What one row judges: (case_id, framework, api, device, mode, part); unique in a run or a merge, and the
        same call in another release (a baseline's)."""
        return (self.case_id, self.framework, self.api, self.device, self.mode, self.part)

    @property
    def refused(self) -> bool:
        """The harness kept this call from running (REFUSED): it was not checked, and its framework did nothing."""
        return is_refusal(self.verdict, self.message)

    @property
    def call(self) -> tuple[str, str, str, str, str]:
        """The key within one framework's run: (case_id, api, device, mode, part)."""
        return (self.case_id, self.api, self.device, self.mode, self.part)

    @property
    def is_accepted(self) -> bool:
        """A divergence the framework's profile documents or a known-findings file accepts."""
        return self.documented or bool(self.known_by)

    def to_json(self) -> str:
        row = {"format_version": FORMAT_VERSION, **vars(self)}  # the fields are RESULT_FIELDS, in their order
        row["verdict"] = self.verdict.value
        row["warnings"], row["missing_warnings"] = list(self.warnings), list(self.missing_warnings)
        row["documented_by"], row["known_by"] = list(self.documented_by), list(self.known_by)
        row["rules"] = list(self.rules)
        row["max_abs_err"], row["bound"] = _finite_or_text(self.max_abs_err), _finite_or_text(self.bound)
        return STRICT_JSON.encode(row)

    @classmethod
    def from_json(cls, text: str) -> "Result":
        return cls.from_row(json.loads(text))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Result":
        """A row parsed from JSON; the caller checks its format_version first."""
        missing = [name for name in RESULT_FIELDS if name not in row]
        if missing:
            raise KeyError(f"missing fields {missing}")
        row = {name: row[name] for name in RESULT_FIELDS}
        row["verdict"] = Verdict(row["verdict"])
        for key in ("warnings", "missing_warnings", "documented_by", "known_by", "rules"):
            row[key] = tuple(row[key])
        for key in ("max_abs_err", "bound"):
            row[key] = _float_from_text(row[key])
        return cls(**row)


def _finite_or_text(x: float | None) -> float | str | None:
    """JSON has no inf/NaN: write them as the strings 'inf', '-inf', 'nan'."""
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _float_from_text(x: float | str | None) -> float | None:
    return float(x) if isinstance(x, str) else x
