"""Where a candidate plan came from, in a user's words: the search tags each scored structure
with a short source ("balanced2", "ls-add-alone", "dapple+lp"); `describe` turns a tag into
the phrase SlotResult.message shows."""
from __future__ import annotations

import re

from ..baselines import LABELS

MOVES = {
    "drop": "a device dropped",
    "move": "a device moved to another group",
    "alone": "a device taken out of its group to run alone",
    "swap": "two devices swapped between groups",
    "merge": "two groups merged",
    "merge-all": "all groups merged into one pipeline",
    "add-alone": "a device added as its own group",
    "add": "a device added to a group",
    "split": "a group split in two",
    "remove": "a device removed from its group, the order kept",
    "insert": "a device inserted into a group where it stands",
    "move-at": "a device moved into another group where it stands",
    "add-split": "a device added to a group, then the group split in two",
    "replace": "a device replaced by an unused one",
    "replace-at": "a device replaced by an unused one where it stands",
    "replace-two": "two devices of a group replaced by two unused ones",
}
"""Local-search moves (solve.local.neighbours)."""

FIXED = {
    "cheapest": "the cheapest known plan",
    "previous": "the previous slot's plan",
    "previous-recut": "the previous slot's groups, cut again for this slot",
    "polish": "polish: other cuts or device orders of the best plan",
    "oracle": "exhaustive enumeration",
}

SUFFIXES = (("+aligned", "groups of equal depth cut alike"),
            ("+busy", "re-cut to spend less busy energy"),
            ("+schedule-cuts", "re-cut for its 1F1B or recomputation memory"),
            ("+schedule", "1F1B or recomputation where memory binds"),
            ("+lp", "with re-optimised shares"), ("+mem", "re-cut to fit memory"),
            ("+alpha", "each group in its order of least bottleneck"))
"""Tag suffixes, outermost first (a tag carries each at most once, in this order from its end)."""


def _family(tag: str) -> str | None:
    m = re.fullmatch(r"(pipe|chunks|balanced|dpw|dpc|dp|roomy|fitted)(\d+)", tag)
    if m:
        kind, k = m.group(1), int(m.group(2))
        return {"pipe": f"one pipeline of the {k} fastest devices",
                "chunks": f"a fast-link chain cut into {k} piece{'s' if k > 1 else ''}",
                "balanced": f"speed-balanced groups ({k})",
                "roomy": f"one pipeline of the {k} devices of most memory",
                "fitted": f"one pipeline of {k} devices in an order that fits in memory (any order of any subset)",
                "dp": f"data parallelism over {k} device{'s' if k > 1 else ''} that hold the model",
                "dpc": f"data parallelism over the {k} fastest devices that hold the model in one cluster of fast "
                       f"links",
                "dpw": f"data parallelism over the {k} device{'s' if k > 1 else ''} that hold the model at the least "
                       f"weighted price per throughput"}[kind]
    m = re.fullmatch(r"clusters(.+)", tag)
    if m:
        try:
            gbps = float(m.group(1)) * 8 / 1e9
        except ValueError:
            return None
        return f"groups of devices linked at {gbps:.3g} Gbit/s or faster"
    return None


def describe(source: str) -> str:
    """The phrase for a candidate source tag; an unknown tag is shown as it is, quoted."""
    notes = []
    tag = source
    for suffix, words in SUFFIXES:
        if tag.endswith(suffix):
            tag = tag[: -len(suffix)]
            notes.append(words)
    if tag in LABELS:
        text = f"baseline {LABELS[tag]}"
    elif tag in FIXED:
        text = FIXED[tag]
    elif tag.startswith("ls-") and tag[3:] in MOVES:
        text = f"local search: {MOVES[tag[3:]]}"
    else:
        text = _family(tag) or f"candidate {tag!r}"
    return ", ".join([text, *reversed(notes)])
