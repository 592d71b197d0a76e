"""Reads users' YAML files (case files, known-findings files) by the YAML 1.2 core schema.

PyYAML resolves plain scalars by YAML 1.1, where `1e-3` and `1E5` are strings (a float
needs a dot), `1:30` is the integer 90, `010` is 8, `yes` is true and `2024-01-01` a date.
A user writing numbers means numbers, so this loader takes the YAML 1.2 core rules
(https://yaml.org/spec/1.2.2/#1032-tag-resolution): `true`/`false`, decimal, `0o` and `0x`
integers, floats with or without a dot or exponent, `.inf` and `.nan`; everything else is
a string. It also refuses what YAML 1.1 accepts silently: a repeated key in a mapping (the
last one used to win), and a float literal too large for float64 (it used to become inf).
Loading is safe: no tag constructs an object. It is also bounded, for the spec too: a document
larger than MAX_TEXT_CHARS, one of more than MAX_NODES values (counted while the parser composes them,
so a huge one costs no more than its limit) or whose aliases expand to more ("billion laughs"),
a recursive alias, an integer longer than Python prints (INT_MAX_DIGITS) and a string holding a lone
surrogate are refused with the place, before anything walks the data. A caller may ask for a lower
limit of values (case files do: cases/userfile.py). The parser is libyaml's where PyYAML was built with it
(yaml.__with_libyaml__), so that parsing is linear in the text at C speed; the resolution of scalars, the
refusals and the construction above are this module's whichever parser runs.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from conformance.core.errors import ConformanceError

MAX_TEXT_CHARS = 64 * 2**20  # a YAML document the harness reads, in characters
MAX_NODES = 8_000_000  # values of a document with its aliases expanded
INT_MAX_DIGITS = 4300  # Python's default int-to-string limit (sys.get_int_max_str_digits)

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
# YAML 1.1 resolvers that the core schema does not have (merge keys and `=` included)
_DROPPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
            "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"}


class TooManyValues(Exception):
    """A document holds more values than its reader takes (the limit is the argument)."""


# libyaml's parser where PyYAML has it: the same events and nodes as PyYAML's own, composed in C
_PARSED = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


class StrictConstructing:
    """Mapping and scalar construction shared by every loader here: repeated keys, unhashable keys and lone
    surrogates (a `"\\ud800"` escape) are errors at their place. The values composed are counted as the
    parser makes them (each node is resolved once): past `max_values` the document is refused at once."""

    max_values = MAX_NODES
    _composed = 0

    def resolve(self, kind, value, implicit):
        self._composed += 1
        if self._composed > self.max_values:
            raise TooManyValues(self.max_values)
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, f"expected a mapping, found {node.id}",
                                                    node.start_mark)
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in mapping
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a list or mapping used as a key",
                                                        key_node.start_mark) from None
            if repeated:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice in one mapping",
                                                        key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_scalar(self, node):
        value = super().construct_scalar(node)
        if isinstance(value, str) and not _is_utf8(value):
            raise yaml.constructor.ConstructorError(None, None, "a lone surrogate (an escape such as \\ud800 "
                                                    "that is half of a character) in a string", node.start_mark)
        return value


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CoreLoader(StrictConstructing, _PARSED):
    """SafeLoader with the YAML 1.2 core schema's booleans and numbers, refusing repeated keys."""

    def construct_sequence(self, node, deep=False):
        """A list, whose numbers (the bulk of a case file) are made without the bookkeeping of construct_object,
        which only lists and mappings need: a number is immutable, so two aliases of it need not be one object."""
        if not isinstance(node, yaml.SequenceNode):
            return super().construct_sequence(node, deep=deep)
        made = []
        for child in node.value:
            scalar = _SCALARS.get(child.tag) if type(child) is yaml.ScalarNode else None
            made.append(scalar(self, child) if scalar is not None else self.construct_object(child, deep=deep))
        return made


def _construct_bool(loader: CoreLoader, node) -> bool:
    return _typed_text(node, _BOOL, "true or false").lower() == "true"


def _typed_text(node, pattern: re.Pattern, kind: str) -> str:
    """A boolean's or number's text, read straight off the node (an implicit one matched `pattern` as it was
    resolved, so it holds no escape to check); an explicit `!!bool`, `!!int` or `!!float` tag on other text is
    an error at its place."""
    text = node.value
    if not isinstance(text, str) or not pattern.match(text):
        raise yaml.constructor.ConstructorError(None, None, f"{text!r} is not {kind}", node.start_mark)
    return text


def _construct_int(loader: CoreLoader, node) -> int:
    text = _typed_text(node, _INT, "an integer")
    check_int_text(text, node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text)


def check_int_text(text: str, node) -> None:
    """An integer literal longer than Python can print in decimal is an error at its place, whatever its base."""
    digits = text.lstrip("+-")
    base = 16 if digits.startswith("0x") else 8 if digits.startswith("0o") else 10
    digits = digits[2:] if base != 10 else digits
    decimal_digits = len(digits.lstrip("0")) * {10: 1.0, 16: 1.2042, 8: 0.9031}[base]
    if decimal_digits > INT_MAX_DIGITS:
        raise yaml.constructor.ConstructorError(None, None, f"an integer of about {int(decimal_digits)} decimal "
                                                f"digits (at most {INT_MAX_DIGITS} are read)", node.start_mark)


def _construct_float(loader: CoreLoader, node) -> float:
    text = _typed_text(node, _FLOAT, "a number")
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return float("-inf") if lowered.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise yaml.constructor.ConstructorError(None, None, f"the number {text} is too large for a float64 "
                                                "(write .inf or -.inf for infinity)", node.start_mark)
    return value


CoreLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:int", _INT, list("-+0123456789"))
CoreLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
CoreLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
CoreLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
CoreLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_SCALARS = {"tag:yaml.org,2002:bool": _construct_bool, "tag:yaml.org,2002:int": _construct_int,
            "tag:yaml.org,2002:float": _construct_float}


def read_text(path, shown: str, error: type[ConformanceError], fix: str, max_bytes: int = 4 * MAX_TEXT_CHARS) -> str:
    """A user file's text, of at most `max_bytes`; an unreadable, larger or non-UTF-8 file is `error` naming
    the file."""
    import os
    import stat

    try:
        # opened without blocking and checked before any read: a FIFO or a device would wait for a writer forever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise error(f"cannot read the file ({exc.strerror})", file=shown, fix=fix) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error("not a regular file (a FIFO, a device or a folder)", file=shown, fix=fix)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1  # the file object owns it now
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read the file ({exc.strerror})", file=shown, fix=fix) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:
        raise error(f"larger than {max_bytes // 2**20} MiB", file=shown,
                    fix="split the file into smaller ones") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"not UTF-8 text (byte {exc.start}, {data[exc.start:exc.start + 1]!r})", file=shown,
                    where=f"line {line}, column {column}", fix="save the file as UTF-8") from None


def parse_yaml(text: str, shown: str, error: type[ConformanceError], loader: type = CoreLoader,
               max_values: int = MAX_NODES) -> Any:
    """Load `text` with `loader` (CoreLoader, or another loader of this module); a syntax or value problem
    names line and column, and so does a document beyond the bounds above (`max_values` values at most,
    aliases expanded)."""
    if not _is_utf8(text):
        raise error("not UTF-8 text (a lone surrogate)", file=shown, fix="save the file as UTF-8")
    if len(text) > MAX_TEXT_CHARS:
        raise error(f"a YAML document of more than {MAX_TEXT_CHARS} characters", file=shown,
                    fix="split the file into smaller ones")
    try:
        return _load_bounded(text, loader, max_values)
    except TooManyValues:
        raise error(f"more than {max_values} values (each number, string, list and mapping counts one)",
                    file=shown, fix="split the file into smaller ones") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = exc.problem or str(exc)
        if "maximum nesting depth" in problem:  # libyaml's limit, where Python's stack is PyYAML's
            raise error(f"invalid YAML: nested too deeply ({problem})", file=shown, where=where,
                        fix="nest lists fewer levels deep") from None
        raise error(f"invalid YAML: {problem}", file=shown, where=where,
                    fix="correct the YAML at that position") from None
    except yaml.YAMLError as exc:  # a reader's error (a control character) names a position, and no mark
        position = getattr(exc, "position", None)
        where = None
        if isinstance(position, int) and position >= 0:  # libyaml counts bytes of UTF-8, PyYAML characters
            before = text.encode("utf-8")[:position].decode("utf-8", "ignore") if _PARSED is not yaml.SafeLoader \
                else text[:position]
            where = f"line {before.count(chr(10)) + 1}, column {len(before) - (before.rfind(chr(10)) + 1) + 1}"
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"invalid YAML: {problem}", file=shown, where=where, fix="correct the YAML syntax") from None
    except RecursionError:
        raise error("invalid YAML: nested too deeply", file=shown, fix="nest lists fewer levels deep") from None


def _load_bounded(text: str, loader_class: type, max_values: int = MAX_NODES) -> Any:
    """yaml.load, with the node graph's expanded size checked between composing and constructing: PyYAML
    shares an aliased node, so composing is linear in the text, but every later walk of the data is not."""
    loader = loader_class(text)
    loader.max_values = max_values
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, max_values)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expansion(root, max_values: int = MAX_NODES) -> None:
    """Refuse a node graph that has a cycle or more than `max_values` values once its aliases are expanded."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise yaml.constructor.ConstructorError(None, None, "a recursive alias (a value that holds itself)",
                                                    node.start_mark)
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += 1 if type(child) is yaml.ScalarNode else size(child)  # a scalar holds nothing more
        elif isinstance(node, yaml.MappingNode):
            for pair in node.value:
                total += sum(1 if type(n) is yaml.ScalarNode else size(n) for n in pair)
        if total > max_values:
            raise yaml.constructor.ConstructorError(None, None, f"more than {max_values} values once its aliases "
                                                    "are expanded", node.start_mark)
        active.discard(key)
        sizes[key] = total
        return total

    size(root)


class SpecLoader(StrictConstructing, _PARSED):
    """The spec's and profiles' loader: PyYAML's safe YAML 1.1 resolution (libyaml's parser where PyYAML has it,
    for speed) with the bounds and refusals above."""

    def construct_yaml_int(self, node):
        check_int_text(str(node.value).replace("_", ""), node)
        return super().construct_yaml_int(node)


SpecLoader.add_constructor("tag:yaml.org,2002:int", SpecLoader.construct_yaml_int)
