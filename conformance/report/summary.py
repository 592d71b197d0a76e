"""Writes summary.json: verdict counts per target and run provenance (schema: spec/summary.schema.json)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

from conformance.model import Result


def render_summary(rows: Iterable[Result], manifests: Sequence[dict[str, Any]]) -> str:
    targets: dict[str, Counter] = defaultdict(Counter)
    undocumented: Counter = Counter()
    spec_hashes = set()
    for r in rows:
        key = f"{r.framework}/{r.api}/{r.device}/{r.part}"
        targets[key][r.verdict.value] += 1
        undocumented[key] += r.verdict.is_divergence and not r.documented
        spec_hashes.add(r.spec_hash)
    summary = {
        "spec_hash": sorted(spec_hashes)[0] if spec_hashes else None,
        "runs": [{k: m.get(k) for k in ("framework", "framework_version", "status", "reason", "cases", "seed",
                                        "python_version", "numpy_version", "harness_version")} for m in manifests],
        "targets": {key: {"results": sum(c.values()), "undocumented": undocumented[key], "verdicts": dict(c)}
                    for key, c in sorted(targets.items())},
        "undocumented": sum(undocumented.values()),
        "results": sum(sum(c.values()) for c in targets.values()),
    }
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"
