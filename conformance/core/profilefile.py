"""A profile file's data (spec/profiles/<framework>.yaml), read and checked against spec/profile.schema.json:
the one reading both the judge's deviations (conformance/judge/profiles.py) and the reports' upstream issues
(conformance/core/upstream.py) start from."""

from __future__ import annotations

from pathlib import Path

import jsonschema

from conformance.core.errors import SpecError
from conformance.core.specload import default_spec_path, load_schema, parse_yaml, yaml_path
from conformance.core.yamlload import read_text


def default_profiles_dir() -> Path:
    return default_spec_path().parent / "profiles"


def profile_data(shown: str, source: Path | dict) -> dict:
    """The profile at `source` (a file, or the profile itself as a dict), checked against its schema.

    Raises
    ------
    SpecError
        naming `shown` and the field, for an unreadable file or one its schema refuses.
    """
    if isinstance(source, dict):
        data = source
    else:
        data = parse_yaml(read_text(source, shown, SpecError, fix="pass --profiles with a directory of readable "
                                                                 "profiles"), shown, SpecError)
    errors = sorted(jsonschema.Draft202012Validator(load_schema("profile.schema.json")).iter_errors(data),
                    key=lambda e: len(e.absolute_path))
    if errors:
        raise SpecError(errors[0].message, file=shown, where=yaml_path(errors[0].absolute_path) or "(top level)",
                        fix="see spec/profile.schema.json")
    return data


def deviation_bases(framework: str, profiles_dir: Path | None = None) -> dict[str, str]:
    """Each deviation id a row of `framework` may name in documented_by, to its basis (docs, maintainers,
    domain); one a port inherits ("<framework>:<id>") is read from the profile it extends. Empty where the
    profile is not there or not readable: a report then names no basis rather than stopping."""
    data = _readable(framework, profiles_dir)
    bases = {row["id"]: row["basis"] for row in data.get("deviations", ())}
    parent = data.get("extends")
    if isinstance(parent, str) and parent != framework:
        bases.update({f"{parent}:{row['id']}": row["basis"]
                      for row in _readable(parent, profiles_dir).get("deviations", ())})
    return bases


def _readable(framework: str, profiles_dir: Path | None) -> dict:
    """A profile's data, or {} where it is absent or its schema refuses it."""
    path = Path(profiles_dir or default_profiles_dir()) / f"{framework}.yaml"
    if not path.is_file():
        path = default_profiles_dir() / f"{framework}.yaml"
    try:
        return profile_data(str(path), path) if path.is_file() else {}
    except SpecError:
        return {}
