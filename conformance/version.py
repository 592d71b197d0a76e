"""The harness's version as `kl-conformance --version` says it: the release written in the package
(`conformance.__version__`), and the commit of the git checkout the harness runs from, where it runs from one.

Never fails and never guesses: without git, outside a checkout, or where git refuses the checkout (another
owner's), it says the release alone. Only the checkout holding the harness's own files counts, so a wheel
installed in a venv inside another project's repository never reports that project's commit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import conformance

GIT_TIMEOUT_S = 10
# variables a git hook or wrapper may set that would point git at another repository than the one named
_GIT_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


def source_root() -> Path:
    """The folder holding the `conformance` package: a checkout's top in a source tree or editable install,
    site-packages in a wheel's install."""
    return Path(conformance.__file__).resolve().parent.parent


def checkout_commit(root: Path) -> str | None:
    """The short hash of the commit checked out at `root`, with `+dirty` where tracked files differ from it;
    None where `root` is not the top of a git checkout, git is absent, or git fails."""
    if not (root / ".git").exists():
        return None
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION}
    # --exclude=*: the hash even where someone tagged a commit by hand (tags are not how releases are made);
    # --no-optional-locks: reading the state never writes the checkout's index
    command = ["git", "--no-optional-locks", "-C", str(root), "describe", "--always", "--dirty=+dirty", "--exclude=*"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=GIT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text and text.isprintable() else None


def version_text(root: Path | None = None) -> str:
    """`0.3.0`; from a git checkout `0.3.0 (commit 1a2b3c4)`, or `0.3.0 (commit 1a2b3c4+dirty)` with changes
    to tracked files not committed. `root` defaults to the folder holding the harness's package."""
    commit = checkout_commit(source_root() if root is None else root)
    return conformance.__version__ if commit is None else f"{conformance.__version__} (commit {commit})"


class VersionAction(argparse.Action):
    """`--version`: print `PROG VERSION_TEXT` and exit 0. git is asked only when the option is given, not each
    time a parser is built."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {version_text()}", file=sys.stdout)
        parser.exit()
