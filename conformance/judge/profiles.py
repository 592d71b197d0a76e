"""Per-framework profiles of documented deviations (spec/profiles/<framework>.yaml).

A profile lists, for each framework API, the conventions in which the framework is
documented (or reported upstream) to depart from the spec, each with a rationale, its basis (`docs`: the
API's documentation; `maintainers`: a closed issue, release notes or a design note; `domain`: the documented
input domain) and a link to where the framework states it. `DeviationLedger.documented` marks a divergence as
documented only when the observation passes under the spec with that API's declared deviations applied,
so an undocumented change in a framework's behaviour still shows up. A deviation documents eager calls only,
unless its `mode:` (a glob over modes) says more: a compiled mode is another implementation, and a deviation
documented for eager must not silently document a compiled mode's different bug.

A port's profile may say `extends: <framework>`: it inherits that framework's deviations, each named
"<framework>:<id>" and applied to the port's APIs that mirror an API it names (Api.mirrors; by default the
API of the same name). `run --like <framework>` adds a framework's deviations the same way without a profile.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from conformance.core.case import Case
from conformance.core.choices import choice_points, get_path, set_choice
from conformance.core.errors import SpecError, unusable_path
from conformance.core.model import EAGER, Expected, Observation, Spec
from conformance.core.profilefile import default_profiles_dir, profile_data
from conformance.core.specload import parse_yaml, spec_hash
from conformance.core.yamlload import read_text
from conformance.judge.compare import passes


@dataclass(frozen=True)
class Deviation:
    id: str
    apis: tuple[str, ...]
    set: dict[str, str]
    exceptions: dict[str, dict[str, str]]  # error id -> {type, match (optional)}
    floating: tuple[str, ...] | None
    rationale: str
    reference: str  # where the framework states it
    basis: str  # docs, maintainers or domain (the module's docstring): what a maintainer points at to close a report
    of: str = ""  # the framework whose APIs `apis` names: "" for the profile's own, else the one inherited from
    mode: str = EAGER  # a glob over the modes it documents; eager only unless the profile says otherwise
    device: str = "*"  # a glob over the devices it documents: a backend's behaviour (Keras on torch) holds on its own
    dtypes: tuple[str, ...] = ()  # the calls it documents: both arguments' dtypes among these; () every call
    parts: tuple[str, ...] = ()  # the parts it documents; () every part

    def documents_mode(self, mode: str) -> bool:
        return fnmatch.fnmatchcase(mode, self.mode)

    def documents(self, mode: str, device: str | None = None, case: Case | None = None,
                  part: str | None = None) -> bool:
        """Whether it documents a call made in `mode` on `device` of `case`'s `part`; `device`, `case` or `part`
        None where the caller has none to name (every device, dtype or part)."""
        if not self.documents_mode(mode) or (device is not None and not fnmatch.fnmatchcase(device, self.device)):
            return False
        if self.parts and part is not None and part not in self.parts:
            return False
        return not self.dtypes or case is None or (case.dtype.input in self.dtypes and case.dtype.target in self.dtypes)


@dataclass(frozen=True)
class Restriction:
    """Calls a framework documents it does not take or does not define (a profile's `unsupported:` entry): the
    run does not send them, and records each as unsupported with this reason and its source. The framework's
    own: a port does not inherit them by `extends:`, its implementation being another."""

    apis: tuple[str, ...]
    parts: tuple[str, ...]  # () for every part
    dtypes: tuple[str, ...]  # () for every dtype; "mixed" for the calls whose input and target dtypes differ
    reason: str
    basis: str
    reference: str
    mode: str = "*"  # a glob over the modes it covers: a restriction of the API holds whatever compiles it
    device: str = "*"  # a glob over the devices it covers: a backend's restriction (Keras on torch) holds on its own

    def covers(self, case: Case, api: str, part: str, mode: str = EAGER, device: str | None = None) -> bool:
        """Whether the entry keeps this call from being sent; `device` None where the caller counts calls of every
        device alike (the self-test's), so an entry covers it whatever device it names."""
        if api not in self.apis or (self.parts and part not in self.parts) or not fnmatch.fnmatchcase(mode, self.mode):
            return False
        if device is not None and not fnmatch.fnmatchcase(device, self.device):
            return False
        if not self.dtypes:
            return True
        pair = (case.dtype.input, case.dtype.target)
        return ("mixed" in self.dtypes and case.dtype.is_mixed) or any(d in self.dtypes for d in pair)

    @property
    def message(self) -> str:
        return f"{self.reason} (documented, {self.basis}: {self.reference})"


def load_restrictions(framework: str, spec: Spec, profiles_dir: Path | None = None,
                      carried: str | Path | dict | None = None) -> list[Restriction]:
    """The `unsupported:` entries of `framework`'s own profile (see Restriction); none without a profile."""
    found = profile_source(framework, profiles_dir, carried)
    if found is None:
        return []
    data = _checked_profile(framework, spec, *found)
    return [Restriction(tuple(row["apis"]), tuple(row.get("parts", ())), tuple(row.get("dtypes", ())), row["reason"],
                        row["basis"], row["reference"], row.get("mode", "*"), row.get("device", "*"))
            for row in data.get("unsupported", ())]


def load_profile(framework: str, spec: Spec, profiles_dir: Path | None = None,
                 carried: str | Path | dict | None = None) -> list[Deviation]:
    """The deviations declared for `framework` (those it inherits by `extends:` included); none when it has no
    profile. The file in `profiles_dir` (else the shipped directory) wins; else `carried`, a profile the
    adapter ships itself (a file path or the profile as a dict).

    Raises
    ------
    SpecError
        naming the profile file and the field, for a malformed profile or one that sets a
        path that is not a choice point of the spec (a {choice, choices} node), or a choice it does not list;
        for an `extends:` naming a framework without a profile, or a cycle of them.
    """
    return _load(framework, spec, profiles_dir, carried)


def _is_dir(path: Path) -> bool:
    try:
        return Path(path).is_dir()
    except OSError as exc:  # a name too long: the one line of bad input it is, before the run has written anything
        problem = unusable_path(exc, where="--profiles")
        if problem is None:
            raise
        raise problem from None


def profile_source(framework: str, profiles_dir: Path | None = None,
                   carried: str | Path | dict | None = None) -> tuple[str, object] | None:
    """(name shown in messages, path or dict) of `framework`'s profile, or None where it has none."""
    if profiles_dir is not None and not _is_dir(profiles_dir):
        # a mistyped --profiles would otherwise mean "no deviation documented" for every framework
        raise SpecError("no such directory", file=str(profiles_dir), where="--profiles",
                        fix="pass --profiles with a directory of <framework>.yaml profiles, or leave it out "
                            "for the shipped ones")
    path = (profiles_dir or default_profiles_dir()) / f"{framework}.yaml"
    if path.is_file():
        return str(path), path
    if os.path.lexists(path):  # a FIFO, a directory, a dangling link: read as absent, it would document nothing
        raise SpecError("not a regular file", file=str(path), where="--profiles",
                        fix=f"make {framework}.yaml a profile file, or remove it")
    if isinstance(carried, dict):
        return f"the profile adapter {framework} carries", carried
    if carried is not None:
        return str(carried), Path(carried)
    return None


MAX_EXTENDS = 16  # profiles one chain of `extends:` holds, the first included


def _load(framework: str, spec: Spec, profiles_dir: Path | None, carried) -> list[Deviation]:
    """`framework`'s deviations, then those of each profile its chain of `extends:` names, followed in a loop
    (never by recursion, so no chain exhausts Python's stack): a chain of more than MAX_EXTENDS profiles, or
    one that comes back to a profile it holds, is refused naming the file that extends."""
    chain: list[str] = []
    deviations: list[Deviation] = []
    while True:
        found = profile_source(framework, profiles_dir, carried)
        if found is None:
            return deviations
        shown, source = found
        data = _checked_profile(framework, spec, shown, source)
        own = _deviations(data, spec, shown)
        deviations += inherited(framework, own) if chain else own  # a parent's, named after it
        parent = data.get("extends")
        if parent is None:
            return deviations
        chain.append(framework)
        if parent in chain:
            cycle = " -> ".join([*chain, parent])
            raise SpecError(f"extends makes a cycle ({cycle})", file=shown, where="extends",
                            fix="extend a framework whose profile does not extend this one")
        if len(chain) >= MAX_EXTENDS:
            raise SpecError(f"extends {parent!r}, which makes a chain of more than {MAX_EXTENDS} profiles "
                            f"({chain[0]} -> ... -> {framework} -> {parent})", file=shown, where="extends",
                            fix=f"extend the framework at the end of the chain directly: a chain of `extends:` "
                                f"holds at most {MAX_EXTENDS} profiles")
        profiles_dir = parent_dir(parent, profiles_dir)
        if profile_source(parent, profiles_dir) is None:
            raise SpecError(f"extends {parent!r}, a framework without a profile", file=shown, where="extends",
                            fix=f"name a framework with a {parent}.yaml in --profiles or in the shipped profiles "
                                f"(spec/profiles)")
        framework, carried = parent, None


def _checked_profile(framework: str, spec: Spec, shown: str, source) -> dict:
    """A profile's data, read and checked against its schema, its file's name and the spec (its upstream
    issues' causes)."""
    data = profile_data(shown, source)
    if data["framework"] != framework:
        raise SpecError(f"framework {data['framework']!r} in a file named for {framework!r}", file=shown,
                        where="framework", fix=f"write framework: {framework}")
    _check_upstream(data, spec, shown)
    return data


def _check_upstream(data: dict, spec: Spec, shown: str) -> None:
    """Each upstream issue's cause names what rows can show: spec paths, an error by its id."""
    for i, row in enumerate(data.get("upstream", ())):
        for path in row["cause"].split(" + "):
            head, _, error_id = path.partition(".")
            if head == "errors" and error_id in spec.error_order:
                continue
            try:
                get_path(spec.data, path)
            except (KeyError, TypeError):
                raise SpecError(f"cause {path!r} is not a path of the spec", file=shown,
                                where=f"upstream[{i}].cause",
                                fix="write the cause as the rows show it (results.jsonl `cause`): spec paths "
                                    "joined by ' + ', an error as errors.<id>") from None


def _deviations(data: dict, spec: Spec, shown: str) -> list[Deviation]:
    """The deviations a checked profile declares itself, each checked against the spec."""
    deviations = []
    for i, row in enumerate(data["deviations"]):
        if any(d.id == row["id"] for d in deviations):  # rows name a deviation by its id: one id, one deviation
            raise SpecError(f"duplicate deviation id {row['id']!r}", file=shown, where=f"deviations[{i}].id",
                            fix="give every deviation of the profile an id of its own")
        points = choice_points(spec.data)
        for dotted, choice in row.get("set", {}).items():
            if dotted not in points:
                raise SpecError(f"{dotted!r} is not a choice point of the spec", file=shown,
                                where=f"deviations[{i}].set", fix=f"set one of the choice points {points}")
            allowed = list(get_path(spec.data, dotted)["choices"])
            if choice not in allowed:
                raise SpecError(f"{dotted} = {choice!r} is not a choice the spec lists", file=shown,
                                where=f"deviations[{i}].set.{dotted}", fix=f"use one of {allowed}")
        for error_id, raised in row.get("exceptions", {}).items():
            if error_id not in spec.error_order:
                raise SpecError(f"unknown error id {error_id!r}", file=shown, where=f"deviations[{i}].exceptions",
                                fix=f"use one of {list(spec.error_order)}")
            if isinstance(raised, dict):
                try:
                    re.compile(raised["match"])
                except re.error as exc:
                    raise SpecError(f"match {raised['match']!r} is not a regular expression ({exc})", file=shown,
                                    where=f"deviations[{i}].exceptions.{error_id}.match",
                                    fix="write a Python regular expression (re.search)") from None
        exceptions = {error_id: raised if isinstance(raised, dict) else {"type": raised}
                      for error_id, raised in row.get("exceptions", {}).items()}
        deviations.append(Deviation(row["id"], tuple(row["apis"]), dict(row.get("set", {})), exceptions,
                                    tuple(row["floating"]) if "floating" in row else None,
                                    row["rationale"], row["reference"], row["basis"], mode=row.get("mode", EAGER),
                                    device=row.get("device", "*"), dtypes=tuple(row.get("dtypes", ())),
                                    parts=tuple(row.get("parts", ()))))
    return deviations


def oldest_release(framework: str, profiles_dir: Path | None = None,
                   carried: str | Path | dict | None = None) -> str | None:
    """The oldest release of `framework` its profile says the adapter supports (`oldest_release:`), or None.
    Read from a profile `load_profile` has validated (the run's ledger loads it first)."""
    found = profile_source(framework, profiles_dir, carried)
    if found is None:
        return None
    shown, source = found
    fix = "pass --profiles with a directory of readable profiles"
    data = source if isinstance(source, dict) else parse_yaml(read_text(source, shown, SpecError, fix=fix), shown,
                                                              SpecError)
    value = data.get("oldest_release") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def older_than(release: str, oldest: str) -> bool:
    """Whether the installed `release` ("2.5.1", "0.1.7 (jax 0.4.13, ...)", "2.13.0+cpu") comes before `oldest`
    ("2.6.2"), by their leading numbers; False where the release states none."""
    match = re.match(r"\d+(?:\.\d+)*", release.strip())
    if match is None:
        return False
    installed = tuple(int(n) for n in match.group().split("."))
    wanted = tuple(int(n) for n in oldest.split("."))
    width = max(len(installed), len(wanted))
    return installed + (0,) * (width - len(installed)) < wanted + (0,) * (width - len(wanted))


def parent_dir(framework: str, profiles_dir: Path | None) -> Path | None:
    """Where a framework a profile extends (or --like names) has its profile: --profiles where it has one
    there, else the shipped profiles."""
    return profiles_dir if profiles_dir is not None and (Path(profiles_dir) / f"{framework}.yaml").is_file() else None


def inherited(framework: str, deviations: list[Deviation]) -> list[Deviation]:
    """`framework`'s deviations as a port takes them: each named "<framework>:<id>" and applied by mirrored API
    (those it inherited in turn keep their names and the framework whose APIs they name)."""
    return [d if d.of else Deviation(f"{framework}:{d.id}", d.apis, d.set, d.exceptions, d.floating, d.rationale,
                                     d.reference, d.basis, of=framework, mode=d.mode, device=d.device, dtypes=d.dtypes,
                                     parts=d.parts)
            for d in deviations]


def apply_deviations(spec: Spec, deviations: list[Deviation]) -> Spec:
    """The spec as the framework behaves by its declared deviations."""
    data = copy.deepcopy(dict(spec.data))
    for deviation in deviations:
        for dotted, choice in deviation.set.items():
            set_choice(data, dotted, choice)
        for row in data["errors"]:
            raised = deviation.exceptions.get(row["id"])
            if raised is not None:
                row["exception"] = raised["type"]
                row.pop("match", None)
                if raised.get("match"):
                    row["match"] = raised["match"]
        if deviation.floating is not None:
            data["dtypes"]["floating"] = list(deviation.floating)
    return Spec(data=data, source=f"{spec.source} with profile {[d.id for d in deviations]}", hash=spec_hash(data))


class DeviationLedger:
    """Decides which divergences a framework's profile documents; with `like`, also those the profile of the
    framework it is judged like documents (see the module's docstring). `mirrors` maps each API to the API of
    that framework it mirrors (by default the API of the same name)."""

    def __init__(self, spec: Spec, framework: str, api_names: list[str], profiles_dir: Path | None = None,
                 like: str | None = None, mirrors: dict[str, str] | None = None,
                 carried: str | Path | dict | None = None):
        deviations = load_profile(framework, spec, profiles_dir, carried)
        own = [d for d in deviations if not d.of]
        unknown = sorted({api for d in own for api in d.apis} - set(api_names))
        if unknown:
            raise SpecError(f"profile names unknown APIs {unknown}", file=str((profiles_dir or default_profiles_dir())
                            / f"{framework}.yaml"), where="deviations[].apis", fix=f"use APIs of {api_names}")
        self.restrictions = load_restrictions(framework, spec, profiles_dir, carried)
        unknown = sorted({api for r in self.restrictions for api in r.apis} - set(api_names))
        if unknown:
            raise SpecError(f"profile names unknown APIs {unknown}", file=str((profiles_dir or default_profiles_dir())
                            / f"{framework}.yaml"), where="unsupported[].apis", fix=f"use APIs of {api_names}")
        if like is not None and like != framework:
            names = {d.id for d in deviations}
            theirs = inherited(like, load_profile(like, spec, parent_dir(like, profiles_dir)))
            deviations += [d for d in theirs if d.id not in names]
        mirrors = mirrors or {}
        self.by_api = {api: tuple(d for d in deviations if (mirrors.get(api, api) if d.of else api) in d.apis)
                       for api in api_names}
        self.spec = spec
        self._specs: dict[tuple[str, ...], Spec] = {}

    def unsupported(self, case: Case, api: str, part: str, mode: str = EAGER, device: str | None = None) -> str | None:
        """Why the profile says `api` does not take or define this call in `mode` on `device` (the reason and its
        source), or None."""
        return next((r.message for r in self.restrictions if r.covers(case, api, part, mode, device)), None)

    def bases(self) -> dict[str, str]:
        """Each deviation id a row may name in documented_by, to its basis: what the run records (run.json's
        `deviation_bases`), so a report names the basis of a profile an adapter carries, which it cannot read."""
        return {d.id: d.basis for deviations in self.by_api.values() for d in deviations}

    def declared(self, api: str, mode: str = EAGER, device: str | None = None, case: Case | None = None,
                 part: str | None = None) -> tuple[Deviation, ...]:
        """The deviations declared for `api` that document calls made in `mode` (eager only, unless a deviation's
        `mode:` says more) on `device` of `case`'s `part` (Deviation.documents)."""
        return tuple(d for d in self.by_api.get(api, ()) if d.documents(mode, device, case, part))

    def fingerprint(self, api: str, mode: str = EAGER, device: str | None = None, case: Case | None = None,
                    part: str | None = None) -> str:
        """Everything of `api`'s deviations for the call that `documented` reads, as text (for the reference
        cache's key of a documented divergence)."""
        return repr(self.declared(api, mode, device, case, part))

    def spec_for(self, api: str, mode: str = EAGER, without: str | None = None, device: str | None = None,
                 case: Case | None = None, part: str | None = None) -> Spec:
        """The spec with every deviation `api` declares for the call applied (but the one whose id is `without`):
        what the framework states it does."""
        return self._spec_with(tuple(d for d in self.declared(api, mode, device, case, part) if d.id != without))

    def _spec_with(self, deviations: tuple[Deviation, ...]) -> Spec:
        key = tuple(d.id for d in deviations)
        if key not in self._specs:
            self._specs[key] = apply_deviations(self.spec, list(deviations))
        return self._specs[key]

    def documented(self, api: str, observed: Observation, expect: Callable[[Spec], Expected],
                   mode: str = EAGER, device: str | None = None, case: Case | None = None,
                   part: str | None = None) -> tuple[str, ...]:
        """Ids of the deviations that document this divergence, or () when it is undocumented.

        Documented means: the observation passes under the spec with all of this API's
        declared deviations for the call's `mode` applied. The ids returned are those it needs: without any one
        of them, it would no longer pass.
        """
        declared = self.declared(api, mode, device, case, part)
        if not declared or not self._passes(declared, observed, expect):
            return ()
        needed = tuple(d.id for d in declared
                       if not self._passes(tuple(o for o in declared if o is not d), observed, expect))
        return needed or tuple(d.id for d in declared)

    def _passes(self, deviations, observed, expect) -> bool:
        return passes(expect(self._spec_with(deviations)), observed)
