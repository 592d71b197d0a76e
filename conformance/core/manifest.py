"""run.json: a run's manifest (what it ran, on what, how it ended), written whole and read back with the type of
every field a report or `repro` reads checked; runs.json of a merge holds one per run.

Written through core/atomicfile.py, so never half-written. Knows the manifest's fields only; never reads rows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.core.atomicfile import write_atomic
from conformance.core.errors import ResultsError
from conformance.core.model import FORMAT_VERSION
from conformance.core.results import MODE_NAME
from conformance.core.runfile import check_format_version, excerpt, is_present, read_json_file

MANIFEST_FILE = "run.json"
MAX_MANIFEST_BYTES = 64 * 2**20  # run.json, or a merge's runs.json of many runs' manifests


def manifest_text(manifest: dict[str, Any]) -> str:
    """run.json's text: the one place its serialisation is stated (write_manifest, and record.record_end's
    in-place rewrite on a full disk)."""
    return json.dumps({**manifest, "format_version": FORMAT_VERSION}, indent=2, sort_keys=True) + "\n"


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    write_atomic(out_dir / MANIFEST_FILE, manifest_text(manifest))


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """run.json of a run directory ({} when there is none); another format version is refused."""
    path = Path(run_dir) / MANIFEST_FILE
    manifest = read_json_file(path, MAX_MANIFEST_BYTES, "manifest", fix="regenerate the run")
    if manifest is None and not is_present(path):
        return {}
    if not isinstance(manifest, dict):
        raise ResultsError("a manifest must be a JSON object", file=str(path), fix="regenerate the run")
    check_format_version(manifest, str(path))
    check_manifest(manifest, str(path))
    return manifest


def _text_list(value: Any) -> bool:
    return type(value) is list and all(type(v) is str for v in value)


def _text_object(value: Any) -> bool:
    return type(value) is dict and all(type(v) is str for v in value.values())


# What a run's status can be: running until it ends, then complete, stopped (a limit it was given), interrupted (a
# signal), failed, or not_run (the framework could not be loaded); a report reads an unfinished run as such.
RUN_STATUSES = ("running", "complete", "stopped", "interrupted", "failed", "not_run")
# The manifest fields reports and `repro` read, each with the test its value must pass; another field (one a
# newer harness adds) is left to the reader that knows it.
_MANIFEST_FIELDS: dict[str, tuple[str, Any]] = {
    **{name: ("a string", lambda v: type(v) is str)
       for name in ("framework", "framework_version", "spec_hash", "harness_version", "python_version",
                    "numpy_version")},
    "status": ("one of " + ", ".join(RUN_STATUSES), lambda v: v in RUN_STATUSES),
    **{name: ("a string or null", lambda v: v is None or type(v) is str) for name in ("reason", "shard")},
    "seed": ("a natural number or null", lambda v: v is None or (type(v) is int and v >= 0)),
    "cases": ("a natural number or null", lambda v: v is None or (type(v) is int and v >= 0)),
    "case_files_kept": ("a list of strings", _text_list),
    **{name: ("a list of strings", _text_list) for name in ("targets", "whole_targets")},
    "counts": ("an object of counts", lambda v: type(v) is dict and all(type(n) is int for n in v.values())),
    "modes": ("a list of mode names", lambda v: _text_list(v) and all(MODE_NAME.fullmatch(m) for m in v)),
    "selection": ("an object", lambda v: type(v) is dict),
    "written": ("a list of strings", _text_list),
    "notes": ("a list of strings", _text_list),
    **{name: ("a string or null", lambda v: v is None or type(v) is str)
       for name in ("like", "profiles", "profiles_digest")},
    **{name: ("an object of strings", _text_object) for name in ("modes_not_run", "apis_not_run", "mirrors")},
}
# The fields of a manifest's `selection` that reports and gates read (core/scope.py), each with its test.
_SELECTION_FIELDS: dict[str, tuple[str, Any]] = {
    "adapter": ("a string", lambda v: type(v) is str),
    "shard": ("a string or null", lambda v: v is None or type(v) is str),
    "seed": ("an integer or null", lambda v: v is None or type(v) is int),
    **{name: ("a list of strings", _text_list) for name in ("narrowed_by", "parts", "apis", "devices")},
    "modes": ("a list of mode names", lambda v: _text_list(v) and all(MODE_NAME.fullmatch(m) for m in v)),
}


def check_manifest(manifest: dict[str, Any], shown: str, where: str | None = None) -> None:
    """Refuse a manifest (run.json, or one run of runs.json) whose fields that reports read have another type
    than a run writes: one line naming the file and field, instead of a crash in a report."""
    checks = [(name, manifest, name, test) for name, test in _MANIFEST_FIELDS.items()]
    if type(manifest.get("selection")) is dict:
        checks += [(f"selection.{name}", manifest["selection"], name, test) for name, test in _SELECTION_FIELDS.items()]
    for place, fields, name, (wanted, ok) in checks:
        if name in fields and not ok(fields[name]):
            raise ResultsError(f"field {place!r} holds {excerpt(fields[name])}, not {wanted}", file=shown,
                               where=", ".join(filter(None, (where, place))), fix="regenerate the run")
