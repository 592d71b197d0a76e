"""The control run's worker pool, which keeps every answer, and the pool that replays them to a variant's run.

A variant that plants a wrong answer calls no framework: its run is the control's answers, each passed through
the variant's planting, judged and written by the runner as any run's. A call that crashed or timed out in
the control run does so again in the replay.

Keeps and replays the control run's outcomes: the recording pool is the control's own worker, and the replay
never calls a framework.
"""

from __future__ import annotations

from typing import Callable, Sequence

from conformance.core.model import Observation
from conformance.run.pool import WorkerPool
from conformance.run.task import Outcome


class RecordingPool(WorkerPool):
    """The control run's worker: it keeps every task's outcome (the framework's answers, or the crash or timeout
    it met), which the variants then plant into."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: dict[int, Outcome] = {}

    def run(self, tasks):
        for outcome in super().run(tasks):
            self.outcomes[outcome.task.index] = outcome
            yield outcome


class ReplayPool:
    """A variant run's worker pool that calls no framework: it answers each task as the control run's worker did,
    each answer passed through `answer(index, call, observed)` (where the variant plants its fault; `index` is the
    case's place in the control run), and a call that crashed or timed out there does so here. The run judges
    and writes these answers as any other. `indices` maps the run's cases to their places in the control run."""

    launched = True
    restarts = 0

    def __init__(self, control: RecordingPool, indices: Sequence[int],
                 answer: Callable[[int, tuple[str, str, str, str], Observation], Observation]):
        self.info, self._outcomes, self._indices, self._answer = control.info, control.outcomes, indices, answer

    def launch(self) -> None:
        pass

    def ready(self) -> bool:
        return True

    def wait_ready(self):
        return self.info

    def close(self) -> None:
        pass

    def run(self, tasks):
        for task in tasks:
            index = self._indices[task.index]
            recorded = self._outcomes.get(index)
            if recorded is None or recorded.task.case.id != task.case.id or recorded.task.calls != task.calls:
                raise RuntimeError(f"the self-test's variant asked for calls of case {task.case.id!r} that its "
                                   "control run did not make")
            yield Outcome(task, {call: self._answer(index, call, observed)
                                 for call, observed in recorded.observations.items()},
                          recorded.failure, recorded.failure_message, dict(recorded.failed_calls), recorded.lost)
            if recorded.lost is not None:  # the control's worker could not be restarted: neither can this one
                raise recorded.lost
