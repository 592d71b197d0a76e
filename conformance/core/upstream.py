"""Known upstream issues: what a framework's own tracker says about a behaviour the run finds.

A profile (spec/profiles/<framework>.yaml) may list `upstream:` entries, each an issue or pull request of the
framework's tracker with its state as the thread shows it (open, closed as by design, fixed in a release), the
cause its rows show (results.jsonl `cause`) and, optionally, the parts it concerns. Read here, in the core, so
that the reports can link a defect to its issue without the judge: the judge's profile loader checks the same
entries against the spec (conformance/judge/profiles.py). A port's profile does not inherit its parent's
entries by `extends:`: they are the parent's tracker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterable

from conformance.core.profilefile import default_profiles_dir, profile_data


@dataclass(frozen=True)
class UpstreamIssue:
    framework: str
    url: str
    state: str  # open, closed-by-design or fixed
    title: str
    cause: str  # as rows show it: spec paths joined by " + "
    parts: tuple[str, ...] = ()  # the parts it concerns; () for every part the cause shows in
    fixed_in: str | None = None  # the first release with the fix, where state is fixed
    modes: tuple[str, ...] = ()  # globs over the modes it concerns; () for every mode

    def covers(self, cause: str, part: str, modes: Iterable[str] = ()) -> bool:
        """Whether rows of `cause` in `part`, made in `modes`, show the behaviour this issue reports: a behaviour
        of a compiler's (Dynamo's exceptions) has the cause eager's documented behaviour has, in other modes."""
        return cause == self.cause and (not self.parts or part in self.parts) \
            and (not self.modes or all(any(fnmatchcase(m, glob) for glob in self.modes) for m in modes))


def upstream_issues(framework: str, profiles_dir: Path | None = None) -> list[UpstreamIssue]:
    """The upstream issues `framework`'s profile lists, in its order; none where it has no profile.

    Raises
    ------
    SpecError
        naming the profile file and the field, for a profile its schema refuses.
    """
    path = Path(profiles_dir or default_profiles_dir()) / f"{framework}.yaml"
    if not path.is_file():
        return []
    data = profile_data(str(path), path)
    return [UpstreamIssue(framework, row["url"], row["state"], row["title"], row["cause"],
                          tuple(row.get("parts", ())), row.get("fixed_in"), tuple(row.get("modes", ())))
            for row in data.get("upstream", ())]
