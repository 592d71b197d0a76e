"""Writes summary.json: verdict counts per target and run provenance (schema: spec/summary.schema.json).

Reads what a Tally gathered; never a framework or the reference.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from conformance.core.model import FORMAT_VERSION
from conformance.report.tally import Tally, split_label


def render_summary(tally: Tally, manifests: Sequence[dict[str, Any]]) -> str:
    targets = {"/".join(split_label(label).values()): (counts, tally.undocumented[label], tally.known[label])
               for label, counts in tally.by_target.items()}
    summary = {
        "format_version": FORMAT_VERSION,
        "spec_hash": sorted(tally.spec_hashes)[0] if tally.spec_hashes else None,
        "runs": [{k: m.get(k) for k in ("framework", "framework_version", "status", "reason", "cases", "seed",
                                        "shard", "python_version", "numpy_version", "harness_version")}
                 for m in manifests],
        "targets": {key: {"results": sum(c.values()), "undocumented": undocumented, "known": known,
                          "verdicts": dict(c)}
                    for key, (c, undocumented, known) in sorted(targets.items())},
        "undocumented": sum(tally.undocumented.values()),
        "known": sum(tally.known.values()),
        "results": tally.total,
    }
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"
