"""The task a worker pool is handed and the outcome it gives back: the calls to make of one case, and their
observations or why they got no answer.

A crash or a timeout while the worker is inside the framework's call is the framework's (cause framework.crash,
framework.timeout); anywhere else it is the harness's (harness.isolation). A pool that cannot load the framework,
or cannot replace a worker that died, raises WorkerUnavailable or WorkerLost.

Plain data shared by the runner, the pool and its workers; never starts a process, and never imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from conformance.core.case import Case
from conformance.core.model import EAGER, Observation, Verdict

# The causes of a call the worker gave no answer to: the framework crashed or hung inside its own call, or the
# harness failed around it (a worker that died between calls, a pipe that broke)
FRAMEWORK_CRASH, FRAMEWORK_TIMEOUT, HARNESS_ISOLATION = "framework.crash", "framework.timeout", "harness.isolation"


class Failure(NamedTuple):
    """Why a call got no answer: its verdict (crash or timeout), the message, and whose failure it was."""

    verdict: Verdict
    message: str
    cause: str


@dataclass(frozen=True)
class Task:
    """One case and the (api, device, mode, part) calls to make of it, numbered in run order."""

    index: int
    case: Case
    calls: tuple[tuple[str, str, str, str], ...]


@dataclass
class Outcome:
    """What came back for one task: an observation per call, or the task's crash/timeout, or (after a crash,
    when the calls were made again one at a time) the crash of each call that crashed on its own."""

    task: Task
    observations: dict[tuple[str, str, str, str], Observation] = field(default_factory=dict)
    failure: Verdict | None = None
    failure_message: str = ""
    failed_calls: dict[tuple[str, str, str, str], Failure] = field(default_factory=dict)
    lost: Exception | None = None  # the worker could not be restarted after this task: nothing more runs
    failure_cause: str = HARNESS_ISOLATION  # whose the task's failure was (the module's docstring)

    def of_the_task(self) -> "Outcome":
        """This outcome, where a task of one call that failed reads as the task's failure (as before its call
        was made again on its own)."""
        if len(self.task.calls) != 1 or not self.failed_calls:
            return self
        failure = next(iter(self.failed_calls.values()))
        return Outcome(self.task, failure=failure.verdict, failure_message=failure.message,
                       failure_cause=failure.cause, lost=self.lost)

    def failed(self, call: tuple[str, str, str, str]) -> Failure | None:
        """Why `call` got no answer, or None."""
        if call in self.failed_calls:
            return self.failed_calls[call]
        return Failure(self.failure, self.failure_message, self.failure_cause) if self.failure is not None else None


def case_limit(timeout_s: float, task: Task) -> float:
    """The time limit of one case: `timeout_s` for its eager calls and as much again for each compiled or graph
    mode among its calls, which may each compile (a new signature compiles once per mode and API)."""
    return timeout_s * (1 + len({call[2] for call in task.calls} - {EAGER}))


class WorkerUnavailable(Exception):
    """The framework cannot be loaded in the worker; carries the reason."""


class WorkerLost(WorkerUnavailable):
    """A worker that died or hung could not be replaced: the run cannot go on."""
