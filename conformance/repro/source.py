"""Where a reproducer finds its case: a user case file, the case files a run kept, or the generated case of its id.

A run directory is data that may come from elsewhere: its run.json is checked before a field of it is used
(run_manifest), and the case files it names are read only from inside it.

Reads case files and run.json; never calls a framework and never writes a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.cases.generate import DEFAULT_SEED, build_case, check_key
from conformance.cases.ids import parse_id
from conformance.cases.userfile import load_case_file
from conformance.core.case import Case
from conformance.core.errors import ResultsError, UsageError
from conformance.run.selection import DEFAULT_MEMORY_BUDGET_MB, over_budget, shapes_need_mb


class CaseSource:
    """Where reproducers find their cases: the user case files of a run (or one named file), each parsed
    once into an index by id, else the generated case of that id drawn with the run's seed."""

    def __init__(self, run_dir: str | None, case_file: str | None, seed: int | None,
                 memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB) -> None:
        self.files = [case_file] if case_file else []
        if run_dir:
            manifest = run_manifest(run_dir)
            seed = manifest.get("seed", seed) if seed is None else seed
            # the copies the run kept inside its directory: the paths the run was given are not read, as a run
            # directory is data that may come from elsewhere, and its run.json must not point this command at
            # any file of this machine
            self.files += [str(_inside(run_dir, kept)) for kept in manifest.get("case_files_kept", [])]
        self.seed = DEFAULT_SEED if seed is None else seed
        self.memory_budget_mb = memory_budget_mb
        self._index: dict[str, Case] = {}
        self._unread = list(self.files)  # read in order, each once, only as far as an id needs

    def get(self, case_id: str) -> Case:
        while case_id not in self._index and self._unread:
            for case in load_case_file(self._unread.pop(0)):
                self._index.setdefault(case.id, case)  # the first file that has the id wins
        if case_id in self._index:
            return self._index[case_id]
        try:
            key = parse_id(case_id)
            check_key(key)
        except ValueError:
            raise UsageError(f"case {case_id!r} is not a generated id and not in {self.files or 'any case file'}",
                             where="CASE_ID", fix="pass --cases FILE or --from RUN_DIR for a user case") from None
        # the budget is applied before any value is drawn: a huge shape in an id must not exhaust the memory
        need_mb = shapes_need_mb(key.input_shape, key.target_shape)
        if need_mb > self.memory_budget_mb:
            raise UsageError(f"case {case_id!r} {over_budget(need_mb, self.memory_budget_mb)}", where="CASE_ID",
                             fix="choose a smaller case, or raise --memory-budget-mb")
        return build_case(key, self.seed)


def run_manifest(run_dir: str | Path) -> dict[str, Any]:
    """run.json of a run directory, with the fields a reproducer reads checked: a damaged or doctored one is
    one line naming the file and field."""
    from conformance.core.manifest import read_manifest

    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise UsageError("no run.json here", file=str(run_dir), where="--from",
                         fix="pass the --out directory of a `kl-conformance run`")
    return read_manifest(run_dir)  # its fields type-checked (results.check_manifest)


def _inside(run_dir: str | Path, name: str) -> Path:
    """The file `name` names inside `run_dir`; one that leads outside it (an absolute path, `..`, a link out)
    is refused."""
    root = Path(run_dir).resolve()
    path = (root / name).resolve() if name and "\0" not in name else root
    if root not in path.parents:
        raise ResultsError(f"case_files_kept names {quoted(name)}, which is not a file inside the run directory",
                           file=str(Path(run_dir) / "run.json"), where="case_files_kept",
                           fix="regenerate the run; a run directory's files are read only from inside it")
    return path


def quoted(value: Any, limit: int = 80) -> str:
    """A value for a one-line message: its repr, ASCII only, cut to `limit`."""
    text = ascii(value)
    return text if len(text) <= limit else text[:limit] + "..."
