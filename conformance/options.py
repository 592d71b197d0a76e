"""The run options every surface takes, stated once: each option's name on the command line, in the pytest
plugin and in the Python API, the values it accepts, and the one line that refuses any other value.

The CLI's parser (cli.py), the plugin's --kl-* options (pytest_plugin.py) and the API's checks (api.py) are
built from this table, so the three accept the same values and refuse a bad one with the same problem text:
`kl-conformance run --timeout-s nan`, `pytest --kl-timeout-s nan` and `kl.run(..., timeout_s=nan)` each say
"expected a number > 0, got 'nan'". Imports only the core's errors at module level: the pytest plugin reads
the table when every pytest session starts, and must import nothing heavy then.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from conformance.core.errors import UsageError

SUITES = ("default", "exhaustive", "modes", "mode-slice", "none")  # `none`: the user case files alone
CLI, PLUGIN, API = "cli", "plugin", "api"  # the surfaces, for the name an option goes by on each


class OptionValueError(ValueError):
    """A value an option does not accept; its text is the problem, the same on every surface."""


def _shown(value: Any) -> str:
    """A value as the command line would have given it: its text, quoted (a NaN is 'nan' on every surface)."""
    return repr(value if isinstance(value, str) else str(value))


def whole(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    """A parser of whole numbers >= `minimum` (and <= `maximum`, where given): a seed, a number of samples; a
    bool or a float is refused."""
    def parse(value: Any) -> int:
        text = value if isinstance(value, str) else str(value)
        try:
            number = int(text)
        except ValueError:
            raise OptionValueError(f"expected a whole number, got {_shown(value)}") from None
        if number < minimum:
            raise OptionValueError(f"expected a whole number >= {minimum}, got {_shown(value)}")
        if maximum is not None and number > maximum:
            raise OptionValueError(f"expected a whole number <= {maximum}, got {_shown(value)}")
        return number
    return parse


# Draws of every generated combination: each multiplies the whole suite, so more than this is a typo, not a
# test plan, and would only keep a command busy.
MAX_SAMPLES = 1000


def positive(value: Any) -> float:
    """A number > 0 (inf allowed: no limit); NaN is refused, as is a bool."""
    text = value if isinstance(value, str) else str(value)
    try:
        number = float(text)
    except ValueError:
        raise OptionValueError(f"expected a number, got {_shown(value)}") from None
    if not number > 0:
        raise OptionValueError(f"expected a number > 0, got {_shown(value)}")
    return number


def one_of(choices: Callable[[], Sequence[str]]) -> Callable[[Any], str]:
    """A parser of one of `choices()` (looked up when a value is checked, so the table imports nothing heavy).
    Its problem text is argparse's own, so the CLI's message is what it always was."""
    def parse(value: Any) -> str:
        names = tuple(choices())
        if not isinstance(value, str) or value not in names:
            raise OptionValueError(f"invalid choice: {_shown(value)} (choose from {', '.join(map(repr, names))})")
        return value
    return parse


def _parts() -> tuple[str, ...]:
    from conformance.core.model import PARTS

    return PARTS


@dataclass(frozen=True)
class Option:
    """One run option: `flag` on the command line, --kl-<flag> in the plugin, `keyword` in the Python API."""

    flag: str  # the CLI's spelling, e.g. "--timeout-s"
    keyword: str  # the Python API's argument or CaseSelection field, e.g. "timeout_s"
    help: str
    parse: Callable[[Any], Any] | None = None  # text (or an API value) -> the checked value; None: any text
    metavar: str | None = None
    repeatable: bool = False
    fix: str = ""  # what to give instead, after a refused value (the plugin's and the API's line)

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def plugin_flag(self) -> str:
        return "--kl-" + self.flag[2:]

    def where(self, surface: str) -> str:
        return {CLI: self.flag, PLUGIN: self.plugin_flag, API: self.keyword}[surface]

    def check(self, value: Any, surface: str, where: str | None = None) -> Any:
        """The checked value; a refused one raises UsageError naming the option as `surface` spells it (or
        `where`: an API argument that takes one value of a repeatable option, as `judge`'s `part`)."""
        if self.parse is None:
            return value
        try:
            return self.parse(value)
        except OptionValueError as exc:
            raise UsageError(str(exc), where=where or self.where(surface), fix=self.fix) from None

    def check_each(self, values: Any, surface: str) -> tuple:
        """A repeatable option's values, each checked; the API's bare string (which would be read letter by
        letter) is refused."""
        if isinstance(values, (str, bytes)) or not _is_sequence(values):
            example = values if isinstance(values, str) else str(values)
            raise UsageError(f"expected a list of values, got {values!r}", where=self.where(surface),
                             fix=f"pass a list or tuple, e.g. {self.keyword}=[{example!r}]")
        checked = []
        for value in values:
            if isinstance(value, os.PathLike) and self.metavar in ("FILE", "DIR"):
                value = os.fspath(value)
            if not isinstance(value, str):
                raise UsageError(f"expected text, got {value!r}", where=self.where(surface),
                                 fix=f"write it as the command line does: {str(value)!r}")
            checked.append(self.check(value, surface))
        return tuple(checked)

    def argparse_type(self, text: str) -> Any:
        """`parse` as an argparse type: a refused value is argparse's one line, naming the option."""
        try:
            return self.parse(text)
        except OptionValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def add_to(self, parser, **overrides) -> None:
        """Add this option to an argparse parser (a CLI command); `overrides` change what differs there."""
        kwargs: dict[str, Any] = {"help": self.help, "metavar": self.metavar}
        if self.parse is not None:
            kwargs["type"] = self.argparse_type
        if self.repeatable:
            kwargs.update(action="append", default=[])
        kwargs.update(overrides)
        parser.add_argument(self.flag, **kwargs)

    def add_to_plugin(self, add: Callable[..., Any], help: str | None = None) -> None:
        """Add this option to the plugin's pytest group as --kl-<flag>, taking text (None where not given):
        the plugin checks it when the suite is set up, so a bad value is one line and pytest's usage exit code."""
        repeated = {"action": "append", "default": []} if self.repeatable else {"default": None}
        add(self.plugin_flag, metavar=self.metavar,
            help=(help or self.help) + (" (repeatable)" if self.repeatable else ""), **repeated)

    def from_plugin(self, config) -> Any:
        """This option's checked value in a pytest session (None, or () if repeatable, where not given)."""
        given = config.getoption("kl_" + self.dest)
        if self.repeatable:
            return self.check_each(given, PLUGIN)
        return None if given is None else self.check(given, PLUGIN)


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and hasattr(value, "__len__")
                                                and not isinstance(value, dict))


_SELECTION_FIX = "check the ids with `kl-conformance cases`"
OPTIONS: dict[str, Option] = {o.dest: o for o in (
    # which cases (CaseSelection's fields)
    Option("--seed", "seed", "draw of the generated values", whole(0), "N",
           fix="give a whole number >= 0, e.g. 0"),
    Option("--suite", "suite", "generated suite: the pairwise design plus edge families (default), the full "
           "product (exhaustive), the mode suite (modes: every family, dtype and reduction once: "
           "docs/guide/modes.md), its slice of the signatures that show every recorded mode finding (mode-slice), "
           "or none (the case files alone)", one_of(lambda: SUITES), "{" + ",".join(SUITES) + "}",
           fix=f"use one of {list(SUITES)}"),
    Option("--samples", "samples", "independent draws of every generated combination (ids end in s0 ... sN-1)",
           whole(1, MAX_SAMPLES), "N", fix=f"give a whole number from 1 to {MAX_SAMPLES}"),
    Option("--cases", "case_files", "user case file", None, "FILE", repeatable=True),
    Option("--only", "only", "only case ids matching this glob", None, "ID", repeatable=True),
    Option("--shard", "shard", "only the K-th of N disjoint shards of the cases (by a hash of the case id), "
           "for CI matrices; merge the N runs with `report`", None, "K/N"),
    Option("--memory-budget-mb", "memory_budget_mb", "refuse a case estimated to need more memory", positive,
           "MB", fix="give a number of megabytes > 0 (inf: no budget)"),
    Option("--reduction", "reduction", "only cases that reduce this way, legacy size_average/reduce variants "
           "included where their pair maps to it", None, "NAME", repeatable=True),
    Option("--log-target", "log_target", "only cases with this log_target (true and false read as 1 and 0)",
           None, "0|1", repeatable=True),
    Option("--dtype", "dtype", "only cases whose input or target has this dtype, or exactly INPUT:TARGET", None,
           "DTYPE", repeatable=True),
    Option("--family", "family", "only cases drawn from this value family, `user` for case files'", None, "NAME",
           repeatable=True),
    # which calls, and how
    Option("--api", "apis", "only this API (dotted name; default all)", None, "NAME", repeatable=True),
    Option("--device", "devices", "only this device (default every device present)", None, "NAME",
           repeatable=True),
    Option("--mode", "modes", "make the calls in this mode: eager, or a compiled or graph mode the adapter offers "
           "(default eager; `kl-conformance modes` lists them)", None, "NAME", repeatable=True),
    Option("--part", "parts", "forward value or a gradient (default every part a case asks for)",
           one_of(_parts), "{forward,grad_input,grad_target,grad2_input}", repeatable=True,
           fix="use one of ['forward', 'grad_input', 'grad_target', 'grad2_input']"),
    Option("--jobs", "jobs", "worker processes the cases are spread over, each loading the framework once; the "
           "rows and reports are those of one (default: the cores this process may use where a compiled or graph "
           "mode is run, else 1)", whole(1), "N",
           fix="give a whole number >= 1, e.g. 2"),
    Option("--timeout-s", "timeout_s", "time limit of one case, and as much again for each compiled mode its "
           "calls are made in; past it the verdict is timeout", positive, "S",
           fix="give a number of seconds > 0 (inf: no limit)"),
    # the gates
    Option("--known", "known", "known-findings file (YAML): divergences it matches are accepted; an entry that "
           "matches nothing is stale and fails", None, "FILE"),
    Option("--baseline", "baseline", "an earlier run, or the file its --write-baseline wrote: what is new, fixed "
           "and changed since", None, "DIR|FILE"),
    # a port judged like a framework (docs/guide/ports.md)
    Option("--like", "like", "judge a port against the spec as amended by FRAMEWORK's profile: a divergence its "
           "deviations document (on the API each port API mirrors) is documented as FRAMEWORK:<id>; the report "
           "counts them", None, "FRAMEWORK"),
    Option("--like-run", "like_run", "with --like: a recorded run of FRAMEWORK; each of the port's divergences is "
           "marked shared with FRAMEWORK's observed behaviour or its own (results.jsonl's `like`)", None, "DIR"),
)}
SELECTION_OPTIONS = ("seed", "suite", "samples", "cases", "only", "shard", "memory_budget_mb", "reduction",
                     "log_target", "dtype", "family")
# the plugin's options beyond --kl-framework, in the order its --help lists them
PLUGIN_OPTIONS = ("only", "cases", "suite", "seed", "known", "baseline", "reduction", "log_target", "dtype",
                  "family", "api", "part", "device", "mode", "timeout_s", "memory_budget_mb", "like", "like_run")


def check_selection(selection: Any, surface: str = API):
    """A CaseSelection whose every field holds a value the CLI's option accepts, converted as the CLI converts
    it (a seed given as "3" becomes 3); raises UsageError naming the field otherwise."""
    from conformance.run.selection import CaseSelection

    if not isinstance(selection, CaseSelection):
        raise UsageError(f"expected a Selection, got {type(selection).__name__}", where="selection",
                         fix="pass conformance.api.Selection(...)")
    checked = {}
    for name in SELECTION_OPTIONS:
        option = OPTIONS[name]
        value = getattr(selection, option.keyword)
        if option.repeatable:
            checked[option.keyword] = option.check_each(value, surface)
        elif option.keyword == "shard":
            if value is not None and not isinstance(value, str):
                raise UsageError(f"expected text K/N, got {value!r}", where=option.where(surface),
                                 fix="write shard='1/4', ..., shard='4/4'")
        else:
            checked[option.keyword] = option.check(value, surface)
    return dataclasses.replace(selection, **checked)


_CLI_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_QUOTED = re.compile(r"(`[^`]*`)")  # a backticked span, kept whole by the split
# what the API calls the options outside the table that checks below the commands name
_API_KEYWORDS = {"--framework": "framework", "--profiles": "profiles", "--cache-dir": "cache_dir", "--out": "out",
                 "--force": "force=True",
                 "--fail-on-own": "fail_on_own", "--fail-on-new": "fail_on_new", "--strict": "strict",
                 "--spec": "load_spec"}


def spelled(where: str, surface: str) -> str:
    """A place that a check below the commands names by the CLI's options ("--dtype", "--only / --cases"), as
    `surface` spells them ("--kl-dtype" in the plugin, "dtype" in the API); any other text (a case id, a YAML
    path) is left as it is."""
    by_flag = {o.flag: o.where(surface) for o in OPTIONS.values()}
    if surface == PLUGIN:
        by_flag.update({"--framework": "--kl-framework", "framework": "--kl-framework",
                        "--fail-on-own": "--kl-fail-on-own"})
    elif surface == API:
        by_flag.update(_API_KEYWORDS)
    if where in by_flag:
        return by_flag[where]
    # a command quoted in backticks keeps its options as the command line spells them
    return "".join(part if part.startswith("`") else _CLI_FLAG.sub(lambda m: by_flag.get(m.group(0), m.group(0)), part)
                   for part in _QUOTED.split(where))
