"""Builds and parses generated case ids; ids are API (profiles, baselines and notes key on them).

Format: ``fwd/{reduction}/log_target={0|1}/{shape}/{dtype}/{family}/s{n}``, e.g.
``fwd/sum/log_target=0/4x6/float32/onehot/s0``; a case whose input holds probabilities (for APIs of
a probability-space dialect, Keras) says so after log_target: ``log_target=0,input=prob``. The reduction may carry legacy
arguments, ``mean(size_average=0,reduce=1)``; a shape may be ``input:target`` when
they differ and may end in ``.T`` or ``.strided`` for non-contiguous views; 0-d is
``scalar``; mixed dtypes are ``input:target``. A case whose tensors the adapter makes otherwise than from a
NumPy array with the dtype given says how after the dtype: ``float64,from=list`` (nested lists of Python
floats), ``float64,from=factory`` (the framework's ``full``), ``float32,from=list,inferred`` (no dtype given:
the framework infers it, spec: dtypes.inferred); ``from=numpy`` appears only with ``,inferred``.
Changing this format is a breaking change.

Works on strings and keys only; never draws values.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from conformance.core.case import NUMPY_DEFAULT, SOURCES, Construction, DtypePair, Params

_LAYOUT_SUFFIX = {"contiguous": "", "transposed": ".T", "strided": ".strided"}
_ID = re.compile(
    r"^fwd/(?P<reduction>[A-Za-z_]*)(?:\((?P<legacy>[a-z_=01,]*)\))?/log_target=(?P<lt>[01])(?P<prob>,input=prob)?/"
    r"(?P<shape>[0-9x]+|scalar)(?::(?P<tshape>[0-9x]+|scalar))?(?P<layout>\.T|\.strided)?/"
    r"(?P<dtype>[a-z0-9]+)(?::(?P<tdtype>[a-z0-9]+))?(?:,from=(?P<source>[a-z]+)(?P<inferred>,inferred)?)?/"
    r"(?P<family>[a-z_0-9]+)/s(?P<sample>[0-9]+)$"
)


@dataclass(frozen=True)
class CaseKey:
    """Every field a generated case id encodes."""

    params: Params
    input_shape: tuple[int, ...]
    target_shape: tuple[int, ...]
    layout: str
    dtype: DtypePair
    family: str
    sample: int = 0
    construction: Construction = NUMPY_DEFAULT


def format_shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


@functools.lru_cache(maxsize=4096)
def _shape_field(input_shape: tuple[int, ...], target_shape: tuple[int, ...], layout: str) -> str:
    shape = format_shape(input_shape)
    if target_shape != input_shape:
        shape += ":" + format_shape(target_shape)
    return shape + _LAYOUT_SUFFIX[layout]


@functools.lru_cache(maxsize=4096)
def _head_fields(params: Params) -> str:
    return (f"fwd/{format_reduction(params)}/log_target={int(params.log_target)}"
            + (",input=prob" if params.prob_input else ""))


def parse_shape(token: str) -> tuple[int, ...]:
    return () if token == "scalar" else tuple(int(d) for d in token.split("x"))


def format_reduction(params: Params) -> str:
    legacy = [f"{name}={int(value)}" for name, value in
              (("size_average", params.size_average), ("reduce", params.reduce)) if value is not None]
    return params.reduction + (f"({','.join(legacy)})" if legacy else "")


def build_id(key: CaseKey) -> str:
    """The id of a generated case. Its fields are made once per distinct value (a suite has a few dozen
    of each), because every shard of an exhaustive suite lists all of its ids, and building each field
    anew for every id would be wasted work."""
    return "/".join((_head_fields(key.params), _shape_field(key.input_shape, key.target_shape, key.layout),
                     _dtype_field(key.dtype, key.construction), key.family, f"s{key.sample}"))


def signature(case_id: str) -> str:
    """What a compiled mode compiles once for: a generated id less its values' family and sample (the reduction,
    log_target, legacy arguments, shapes, layout, dtypes and construction)."""
    return case_id.rsplit("/", 2)[0]


def _dtype_field(dtype: DtypePair, construction: Construction) -> str:
    return str(dtype) + ("," + str(construction) if not construction.is_default else "")


def parse_id(case_id: str) -> CaseKey:
    """Inverse of `build_id`; raises ValueError naming the expected format."""
    m = _ID.match(case_id)
    if not m:
        raise ValueError(f"{case_id!r} is not a generated case id "
                         "(fwd/REDUCTION/log_target=0|1/SHAPE/DTYPE[,from=SOURCE[,inferred]]/FAMILY/sN)")
    if m["source"] is not None and m["source"] not in SOURCES:
        raise ValueError(f"{case_id!r}: from={m['source']} is no construction (one of {list(SOURCES)})")
    legacy = _parse_legacy(m["legacy"], case_id) if m["legacy"] is not None else {}
    params = Params(
        reduction=m["reduction"], log_target=m["lt"] == "1",
        size_average=bool(int(legacy["size_average"])) if "size_average" in legacy else None,
        reduce=bool(int(legacy["reduce"])) if "reduce" in legacy else None,
        prob_input=bool(m["prob"]),
    )
    input_shape = parse_shape(m["shape"])
    layout = {"": "contiguous", ".T": "transposed", ".strided": "strided"}[m["layout"] or ""]
    return CaseKey(
        params=params, input_shape=input_shape,
        target_shape=parse_shape(m["tshape"]) if m["tshape"] else input_shape, layout=layout,
        dtype=DtypePair(m["dtype"], m["tdtype"] or m["dtype"]), family=m["family"], sample=int(m["sample"]),
        construction=Construction(m["source"], bool(m["inferred"])) if m["source"] else NUMPY_DEFAULT,
    )


def _parse_legacy(text: str, case_id: str) -> dict[str, str]:
    """`size_average=0,reduce=1` to a dict; anything else names the accepted form."""
    legacy: dict[str, str] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name not in ("size_average", "reduce") or value not in ("0", "1") or name in legacy:
            raise ValueError(f"{case_id!r}: legacy argument {item!r} is not size_average=0|1 or reduce=0|1")
        legacy[name] = value
    return legacy
