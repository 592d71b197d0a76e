"""What a baseline holds for the gates, read from a run's (or merge's) directory or from the compact file that
`--write-baseline` writes; and writing that file.

The file is gzip'd JSON lines holding only what the comparison (report/baseline.py) and its checks read: a header
(its format and version, the spec's hash, the seeds of generated cases, the release of each framework), then one
line per case (its id, its case digest, and each row's key, verdict and cause). Lines and rows are in a fixed
order and the gzip header holds no time or name, so the same rows give the same bytes and a refresh that changed
nothing commits no change. Reads and writes rows only.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from conformance.core.errors import ResultsError, UsageError
from conformance.core.manifest import read_manifest
from conformance.core.model import PARTS, Result, Verdict, key_label
from conformance.core.atomicfile import write_bytes_atomic
from conformance.core.results import CASE_DIGEST, MODE_NAME, RESULTS_FILE, iter_results
from conformance.core.rundirs import other_spec
from conformance.core.runfile import MAX_LINE_BYTES, is_present
from conformance.core.text import terminal_line

Key = tuple[str, str, str, str, str, str]  # Result.key: (case_id, framework, api, device, mode, part)
BASELINE_FORMAT = "kl-conformance baseline"  # the file's first line names it, with its version
BASELINE_VERSION = 1
REBASELINE = ("re-baseline: run the accepted build again with this harness "
              "(kl-conformance run ... --write-baseline FILE, or --force --out DIR)")
_VERDICTS = frozenset(v.value for v in Verdict)


def row_state(r: Result) -> tuple[str, str]:
    """What the gates compare of a row: its verdict, and its cause where it is a divergence."""
    return (r.verdict.value, r.cause if r.verdict.is_divergence else "")


def one_release(row: Result, first_release: dict[str, str], file: str, where: str, fix: str) -> None:
    """A baseline compares a call with the same call of another release: each side may hold one release of a
    framework (two would make one key two rows). Raises ResultsError at a framework's second release."""
    first = first_release.setdefault(row.framework, row.framework_version)
    if row.framework_version != first:
        raise ResultsError(f"these results hold two releases of {row.framework} ({first} and "
                           f"{row.framework_version}): a baseline compares one call with the same call of one "
                           "release", file=file, where=where, fix=fix)


@dataclass(frozen=True)
class BaselineRow:
    """What the gates compare of one baseline row: its verdict, and its cause where it is a divergence."""

    verdict: Verdict
    cause: str


@dataclass
class Baseline:
    """What a baseline holds for the comparison and its checks, read from a run's directory or a compact file.

    `shown` is the file a message names; `states` maps each row key to (verdict, cause), `digests` each case id
    to its case digest, `seeds` are those generated rows were drawn with, `releases` the one release per
    framework."""

    shown: str
    spec_hashes: set[str] = field(default_factory=set)
    seeds: set[int] = field(default_factory=set)
    releases: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    states: dict[Key, tuple[str, str]] = field(default_factory=dict)

    def rows(self) -> dict[Key, BaselineRow]:
        return {key: BaselineRow(Verdict(verdict), cause) for key, (verdict, cause) in self.states.items()}


_LAST_READ: list = []  # the signature of the file last read by load_baseline, and what it held


def load_baseline(path: str | Path, where: str = "--baseline") -> Baseline:
    """The baseline at `path`: a run's (or merge's) directory, or a file `--write-baseline` wrote.

    Raises
    ------
    UsageError
        where there is no such directory or file, or the directory holds no results.jsonl.
    ResultsError
        for a damaged or foreign file, rows of two releases of one framework, or one case with two digests.
    """
    given = Path(path)
    try:  # a FIFO or a loop of links as the baseline: named as the baseline, with a fix that fits
        directory = is_present(given, directory=True)
        regular = not directory and is_present(given)
    except ResultsError as exc:
        raise ResultsError(exc.problem, file=exc.file, where=where, fix="pass the --out directory of an earlier "
                           "run, or the file its --write-baseline wrote") from None
    if directory:
        if not is_present(given / RESULTS_FILE):
            raise UsageError("no results.jsonl in the baseline directory", file=str(path), where=where,
                             fix="pass the --out directory of an earlier run, or the file its --write-baseline wrote")
        try:  # its run.json, as `report` reads it: a damaged or foreign one is refused, never passed over
            read_manifest(given)
        except ResultsError as exc:
            exc.where = ", ".join(filter(None, (where, exc.where)))
            exc.args = (exc.render(),)
            raise
        read = given / RESULTS_FILE
    elif not regular:
        raise UsageError("no such baseline directory or file", file=str(path), where=where,
                         fix="pass the --out directory of an earlier run, or the file its --write-baseline wrote")
    else:
        read = given
    # a command checks its baseline, then compares with it: one read while the file is the same file, unchanged
    stat = read.stat()
    signature = (str(given), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if _LAST_READ and _LAST_READ[0] == signature:
        return _LAST_READ[1]
    held = _from_rows(iter_results(given), str(read), where) if read is not given else _from_file(given, where)
    _LAST_READ[:] = [signature, held]
    return held


def check_baseline_draw(baseline: "Baseline | str | Path", spec_hash: str, seed: int,
                        where: str = "--baseline") -> None:
    """A baseline of another spec or another --seed would compare other cases under the same ids."""
    held = baseline if isinstance(baseline, Baseline) else load_baseline(baseline, where)
    for found in sorted(held.spec_hashes):
        if found != spec_hash:
            raise other_spec(found, spec_hash, held.shown, where, REBASELINE)
    for drawn in sorted(held.seeds):
        if drawn != seed:
            raise ResultsError(f"the baseline drew its cases with --seed {drawn}, this run with --seed {seed}",
                               file=held.shown, where=where,
                               fix=f"run with --seed {drawn}, or take a baseline made with --seed {seed}")


def write_baseline(run_dir: str | Path, path: str | Path) -> Baseline:
    """Write the compact baseline of the rows in `run_dir` to `path` (its folders made as needed).

    Raises
    ------
    ResultsError
        where the rows hold two specs (no baseline can be of both), or the file cannot be written.
    """
    held = load_baseline(run_dir)
    if len(held.spec_hashes) > 1:
        raise ResultsError(f"these results were made with {len(held.spec_hashes)} specs "
                           f"{sorted(held.spec_hashes)}", file=held.shown, where="--write-baseline",
                           fix="write the baseline of runs made with one spec")
    by_case: dict[str, list] = {}
    for key, (verdict, cause) in held.states.items():
        by_case.setdefault(key[0], []).append([*key[1:], verdict, cause])
    header = {"format": BASELINE_FORMAT, "format_version": BASELINE_VERSION,
              "spec_hash": next(iter(held.spec_hashes), None), "seeds": sorted(held.seeds),
              "releases": dict(sorted(held.releases.items()))}
    lines = [_line(header)] + [_line({"case": case_id, "digest": held.digests[case_id], "rows": sorted(rows)})
                               for case_id, rows in sorted(by_case.items())]
    # mtime 0 and no file name in the gzip header: the same rows give the same bytes
    data = gzip.compress("".join(lines).encode("utf-8"), compresslevel=9, mtime=0)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(Path(path), data)
    except OSError as exc:
        raise ResultsError(f"cannot be written ({exc.strerror or type(exc).__name__})", file=str(path),
                           where="--write-baseline", fix="name a file in a writable folder with room") from None
    return held


def baseline_written(held: Baseline, path: str | Path) -> str:
    """The line a command prints once it wrote a baseline file."""
    return (f"Baseline: {terminal_line(str(path))} ({len(held.states)} results of {len(held.digests)} cases, "
            f"{Path(path).stat().st_size} bytes)")


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"


def _from_rows(rows: Iterable[Result], shown: str, where: str) -> Baseline:
    held = Baseline(shown)
    for r in rows:
        one_release(r, held.releases, shown, where, "give as the baseline a run (or merge) of one release per "
                    "framework")
        digest = held.digests.setdefault(r.case_id, r.case_digest)
        if digest != r.case_digest:
            raise ResultsError(f"the baseline holds two case digests for this case ({digest} and {r.case_digest})",
                               file=shown, where=f"case {r.case_id!r}", fix="pass a run (or merge) of one --seed "
                               "and one version of its case files: " + REBASELINE)
        held.states[r.key] = row_state(r)
        held.spec_hashes.add(r.spec_hash)
        if r.source == "generated" and r.seed is not None:
            held.seeds.add(r.seed)
    return held


def _from_file(path: Path, where: str) -> Baseline:
    """A compact baseline file; anything else (another format or version, a damaged file) is refused naming
    the file and the line."""
    held = Baseline(str(path))
    number = 0

    def refuse(problem: str) -> ResultsError:
        return ResultsError(problem, file=str(path), where=f"{where}, line {number}" if number else where,
                            fix=REBASELINE)
    try:
        with gzip.open(path, "rb") as f:
            while line := f.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(line) > MAX_LINE_BYTES:
                    raise refuse("a line longer than any baseline file holds")
                document = json.loads(line)
                if not isinstance(document, dict):
                    raise refuse(f"a line must be a JSON object, got {type(document).__name__}")
                problem = _header_problem(document, held) if number == 1 else _case_problem(document, held)
                if problem:
                    raise refuse(problem)
    except (OSError, EOFError, zlib.error, ValueError, RecursionError) as exc:  # gzip.BadGzipFile is an OSError
        raise refuse(f"not a baseline file {BASELINE_FORMAT!r} ({type(exc).__name__}: {exc})") from None
    if number == 0:
        raise refuse("an empty file, not a baseline")
    if held.states and not held.spec_hashes:  # what --write-baseline writes of any result names its spec
        number = 1
        raise refuse("a header without the spec's hash (spec_hash) for a baseline of results")
    return held


def is_baseline_file(path: Path) -> bool:
    """The file opens as a compact baseline: gzip whose first line names BASELINE_FORMAT (of any version). What
    --write-baseline may replace, besides a file of none."""
    try:
        with gzip.open(path, "rb") as f:
            header = json.loads(f.readline(MAX_LINE_BYTES + 1))
    except (OSError, EOFError, zlib.error, ValueError, RecursionError):
        return False
    return isinstance(header, dict) and header.get("format") == BASELINE_FORMAT


def _header_problem(header: dict[str, Any], held: Baseline) -> str | None:
    if header.get("format") != BASELINE_FORMAT:
        return f"not a baseline file: its first line names no format {BASELINE_FORMAT!r}"
    if header.get("format_version") != BASELINE_VERSION:
        return (f"a baseline file of format version {header.get('format_version')!r}; this harness reads version "
                f"{BASELINE_VERSION}")
    spec_hash, seeds, releases = header.get("spec_hash"), header.get("seeds"), header.get("releases")
    if not (spec_hash is None or type(spec_hash) is str) or type(seeds) is not list or \
            not all(type(s) is int and s >= 0 for s in seeds) or type(releases) is not dict or \
            not all(type(k) is str and type(v) is str for k, v in releases.items()):
        return "a header whose spec_hash, seeds or releases have another type than a baseline file holds"
    held.spec_hashes.update([spec_hash] if spec_hash else [])
    held.seeds.update(seeds)
    held.releases.update(releases)
    return None


def _case_problem(document: dict[str, Any], held: Baseline) -> str | None:
    case_id, digest, rows = document.get("case"), document.get("digest"), document.get("rows")
    if type(case_id) is not str or not case_id.strip() or type(digest) is not str or \
            not CASE_DIGEST.fullmatch(digest) or type(rows) is not list:
        return "a case line needs a case id, its digest (24 hex digits) and its rows"
    if case_id in held.digests:
        return f"case {case_id!r} appears twice"
    held.digests[case_id] = digest
    for row in rows:
        if type(row) is not list or len(row) != 7 or not all(type(v) is str for v in row):
            return f"case {case_id!r}: a row must be [framework, api, device, mode, part, verdict, cause]"
        framework, api, device, mode, part, verdict, cause = row
        if part not in PARTS or not MODE_NAME.fullmatch(mode) or verdict not in _VERDICTS:
            return f"case {case_id!r}: a row with an unknown part, mode or verdict ({part!r}, {mode!r}, {verdict!r})"
        key = (case_id, framework, api, device, mode, part)
        if key in held.states:
            return f"case {case_id!r}: the row {key_label(key)} appears twice"
        held.states[key] = (verdict, cause)
    return None
