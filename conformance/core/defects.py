"""The defect: one distinct behaviour of one framework release, which every divergent row belongs to.

A maintainer triages behaviours, not rows. Rows of one behaviour differ in what does not change it: the API
of one implementation (a module and its functional form), the part, the dtype, the shape, the layout, the
legacy arguments, the mode (a mode that answers as eager shows eager's defect; one that answers otherwise
has a cause of its own) and the runtime beneath the framework's own code (Keras's backend, optax's JAX, R torch's
libtorch: what a version names after the release, `release_of`; a behaviour of one runtime only shows on its
rows alone). So a row's defect is named by what stays: the framework release, the implementation,
and either the profile's deviations that document it (a documented defect is one statement of the framework's)
or, undocumented, its root cause: the residual cause (what
remains once the profile is applied; the run records it as the row's cause), with the loss's and the gradients'
convention at one edge as one, and a rule of the call's signature beside rules of the values left to the rows it
explains alone; a row that shows two behaviours at once is the first's, the other also showing there
(`root_cause`). An unexplained divergence has no cause, but where its answer lies within rounding of a behaviour
(run/judging.py says which) it is that behaviour's row: the rows that show the behaviour beyond rounding are its
evidence, and the report counts those that lie only within rounding of it (`within_behaviour`). Else it is named
by what it shows: its verdict, its part, its dtype's width and the size of its error.

The id is a digest of that signature, so a run, a shard, a merge and a baseline name one behaviour alike.
"""

from __future__ import annotations

import hashlib
import math
import re

from conformance.core.model import CLAIM, UNEXPLAINED, WITHIN, Result, Verdict

FRAMEWORK_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")  # an adapter's name, a word safe as a file's stem
DEFECT_ID = re.compile(FRAMEWORK_NAME.pattern + r"-[0-9a-f]{10}")  # "<framework>-<digest>": what defect_id gives
NARROW_DTYPES = frozenset({"float16", "bfloat16"})
_SIGNATURE = "signature."  # the spec's section of the call's arguments
BESIDE_PROFILE = " (beside the profile; the spec alone: "  # a row's message shows what remains beside the profile
# (run/judging.py), then what the spec alone shows
_CONVENTION = re.compile(r"^(pointwise|gradients)\.conventions\.")  # the loss's and the gradients' edge conventions
_RAISED = re.compile(r"raised ([A-Za-z_][A-Za-z0-9_.:]*)(?:: (.*?))?(?:; spec expects|$)", re.S)  # an error row's
# message names what it raised, and the framework's words
_SENTENCE_END = re.compile(r"\.\s|\n|\s\(|\.$")
# what of an error's first sentence names the behaviour: plain words, not what varies from call to call (quoted
# names and values, paths, shapes, the case's own text)
_QUOTED = re.compile(r"(?<!\w)'[^']*'|(?<!\w)\"[^\"]*\"")
_WORD = re.compile(r"[A-Za-z_]([A-Za-z_-]*[A-Za-z_])?[:,;.]?")
_WORDS = 8
CHOSEN = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*) = ([A-Za-z_][A-Za-z0-9_]*)")  # "path = choice", as messages say it
_ERROR_SIZES = ((16.0, "within 16 bounds"), (1e4, "within 10^4 bounds"))  # else "larger"


def cause_paths(cause: str) -> tuple[str, ...]:
    """The spec paths (or fault and rule names) a row's cause joins with " + "."""
    return tuple(p for p in (c.strip() for c in cause.split(" + ")) if p)


def residual_cause(cause: str, documented_paths: frozenset[str]) -> str:
    """What of `cause` the framework's profile does not state: a documented convention beside an undocumented
    one (legacy precedence, say) is a defect of the undocumented one alone. A cause the profile states whole
    stays as it is (the row is then documented, or the profile's statement does not cover this case)."""
    paths = cause_paths(cause)
    rest = tuple(p for p in paths if p not in documented_paths)
    return " + ".join(rest) if rest and len(rest) < len(paths) else cause


def root_cause(cause: str) -> str:
    """What a cause merges by: its first behaviour (`behaviours`). A row that shows two behaviours at once (the
    target's own terms in its dtype, and the product rule those terms then round) belongs to the first, in the
    order explain names them in (core/choices.py: TOUCHES, where a call's dtypes come before its gradients'
    conventions); the report lists the others as also showing there."""
    return behaviours(cause)[0]


def behaviours(cause: str) -> tuple[str, ...]:
    """The distinct behaviours a cause names, in its order. The spec states each edge convention twice, for the
    loss (`pointwise.conventions.X`) and for its gradients (`gradients.conventions.X`), under one `applies`: the
    parts of one edge are one behaviour. A rule of the call's signature (how its arguments are read: legacy
    precedence) beside rules of the values is the values' behaviour: the signature's own rows show it apart."""
    paths = cause_paths(cause)
    values = [p for p in paths if not p.startswith(_SIGNATURE)] or list(paths)
    return tuple(dict.fromkeys(_CONVENTION.sub("conventions.", p) for p in values))


def within_text(message: str) -> str:
    """What a row's message says its answer lies within rounding of ("a = x, b = y", run/judging.py); "" if
    nothing."""
    return message.partition(WITHIN)[2].partition(CLAIM)[0]


def within_behaviour(row: Result) -> str | None:
    """The behaviour an unexplained divergence lies within rounding of, as `root_cause` names it: its message's
    "within rounding of a = x, b = y" read as the cause "a + b"; None where it says none."""
    if row.cause != UNEXPLAINED:
        return None
    paths = [path for path, _ in CHOSEN.findall(within_text(row.message))]
    return root_cause(" + ".join(paths)) if paths else None


def error_size(max_abs_err: float | None, bound: float | None) -> str:
    """How far outside its bound a value divergence is, in three classes: an error a few bounds out is another
    behaviour than one that loses every digit."""
    if max_abs_err is None or not bound or not math.isfinite(max_abs_err) or not math.isfinite(bound):
        return "not finite"
    ratio = max_abs_err / bound
    return next((label for limit, label in _ERROR_SIZES if ratio <= limit), "larger")


def width(dtype: str) -> str:
    """A dtype's class as a behaviour shows it: narrow (float16, bfloat16) or wide."""
    return "narrow" if dtype in NARROW_DTYPES else "wide"


def signature(row: Result, implementation: str) -> tuple[str, ...] | None:
    """What one behaviour is: rows with the same signature are one defect (see the module's docstring); None for
    a pass and for a call the harness refused. An unsupported row's behaviour is its implementation's refusal of a part: one line per API and part."""
    if row.verdict is Verdict.PASS or row.refused:  # a refused call is the harness's, not the framework's
        return None
    head = (row.framework, release_of(row.framework_version), implementation)
    if row.verdict is Verdict.UNSUPPORTED:  # by the reason: a documented restriction (each its own), no kernel, ...
        reason, documented, _ = row.message.partition(" (documented")
        # less what the case puts in it (the reduction it names, 'avg' or 'SUM'): one refusal of an argument
        return (*head, "unsupported", row.part, reason if documented else _QUOTED.sub("", reason.split(":", 1)[0]))
    head += ("documented by " + ",".join(sorted(row.documented_by)),)
    if row.documented_by:  # one statement of the framework's, whatever it reproduces at each edge it names
        return head
    if row.cause and row.cause != UNEXPLAINED:
        return (*head, root_cause(row.cause))
    near = within_behaviour(row)
    if near:  # the behaviour its answer lies within rounding of: that behaviour's defect, not one of its own
        return (*head, near)
    raised = raised_words(row.message) if row.verdict is Verdict.ERROR else None
    if raised:  # one refusal, whatever part or dtype meets it: by what it raised and the framework's words
        return (*head, UNEXPLAINED, row.verdict.value, raised)
    return (*head, UNEXPLAINED, row.verdict.value, row.part, width(row.dtype),
            error_size(row.max_abs_err, row.bound))


def release_of(framework_version: str) -> str:
    """The framework's own release in a row's version: its first word ("3.15.1" of "3.15.1 (jax 0.12.0.1, x64)");
    the words after it name the runtime beneath (adapters/offer.py: Offer.release reads a release alike)."""
    words = framework_version.split(maxsplit=1)
    return words[0] if words else framework_version


def runtime_of(framework_version: str) -> str:
    """The runtime beneath the release in a row's version ("jax 0.12.0.1, x64" of "3.15.1 (jax 0.12.0.1, x64)"):
    its words after the release, out of their parentheses; the whole version where it names none."""
    rest = framework_version.strip()[len(release_of(framework_version)):].strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1].strip()
    return rest or framework_version


def raised_words(message: str) -> str | None:
    """What an error row raised, as one behaviour: the exception's type and the plain words that open its message
    ("RuntimeError: InferDataType Failed"), up to the first that varies from call to call (a number, a quoted
    name, a path, the case's own text), so the same refusal of other shapes, dtypes or parts reads alike; None
    where the row raised nothing (it returned a value where an error is due)."""
    found = raised(message)
    if found is None:
        return None
    kind, sentence = found
    words = []
    for word in _QUOTED.sub("", sentence).split():
        if not any(c.isalpha() for c in word):
            continue  # what a quoted name left behind (its comma)
        if not _WORD.fullmatch(word) or len(words) == _WORDS:
            break
        words.append(word)
    return f"{kind}: {' '.join(words)}".rstrip(": ") if words else kind


def raised(message: str) -> tuple[str, str] | None:
    """What an error row raised: the exception's type and the first sentence of its message, as the framework
    said it (a title shows it); None where the row raised nothing."""
    found = _RAISED.search(message)
    return None if not found else (found.group(1), _SENTENCE_END.split(found.group(2) or "", 1)[0].strip())


def defect_of(row: Result, implementation: str) -> str:
    """The id of the defect `row` belongs to; "" for a pass."""
    found = signature(row, implementation)
    return "" if found is None else defect_id(row.framework, found)


def defect_id(framework: str, signature_: tuple[str, ...]) -> str:
    """The defect's id: the framework's name (as results name it) and a digest of its signature."""
    digest = hashlib.blake2b("\x1f".join(signature_).encode(), digest_size=5).hexdigest()
    return f"{_name(framework)}-{digest}"


def _name(framework: str) -> str:
    """The framework's name as an id's first piece (an adapter named "module:Class" keeps its letters)."""
    name = re.sub(r"[^a-z0-9_-]+", "-", framework.lower()).strip("-")[:64]
    return name if name and name[0].isalpha() else f"f{name}"[:64]
