"""The label a branch runs under in a trace, and its name back: one value, round-tripped.

TorchScript writes a `record_function` label that is not printable ASCII as "unknown", and the
profiler's JSON export turns a backslash into "/", so a branch's label is printable ASCII without
backslashes whatever its name: "branch: " then the name with its links "→" written "->" and every
other character outside printable ASCII, and "%", "\\" and '"', percent-encoded as UTF-8 bytes
("côté" → "c%C3%B4t%C3%A9"). `branch_name` undoes exactly that, so a module named "côté" is "côté"
in run.json, in the legend and on the timeline, whichever mode ran it.
"""

from __future__ import annotations

import string
from urllib.parse import quote, unquote

#: Prefix of the record_function label around each branch.
BRANCH_PREFIX = "branch: "
_LINK, _TRACE_LINK = " → ", " -> "
#: Written as they are: printable ASCII but for the escape itself and what the export mangles.
_SAFE = "".join(c for c in string.printable if " " <= c <= "~" and c not in '%\\"')


def branch_label(name: str) -> str:
    """The label a branch runs under: "branch: a -> b" for the branch named "a → b" (ASCII)."""
    return BRANCH_PREFIX + quote(name.replace(_LINK, _TRACE_LINK), safe=_SAFE)


def branch_name(label: str) -> str | None:
    """The branch name of a label written by `branch_label`; None for other labels."""
    if not label.startswith(BRANCH_PREFIX):
        return None
    return unquote(label[len(BRANCH_PREFIX) :]).replace(_TRACE_LINK, _LINK)
