"""What the engine tests read in an engine's own log: wcache's one line per rank and load (wcache.engine.summary)."""

from __future__ import annotations

import re


def wcache_line(log: str, source: str) -> str:
    """wcache's summary line for source ("attached", "published", "loaded")
    in an engine log; fails unless there is exactly one, with its tensors,
    MiB and seconds."""
    verb = {"attached": "attached from the daemon", "published": "published to the daemon",
            "loaded": "loaded from disk without the daemon"}[source]
    lines = [ln for ln in log.splitlines() if "wcache: " in ln and verb in ln]
    assert len(lines) == 1, f"no single wcache {source} line in the engine's log:\n" + \
                            "\n".join(ln for ln in log.splitlines() if "wcache" in ln)
    assert re.search(r"\d+ tensors, [\d.]+ MiB in [\d.]+ s", lines[0]), lines[0]
    return lines[0]
