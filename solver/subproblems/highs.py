"""A silent HiGHS instance: the solver's console banner ("Running HiGHS ...") is printed by the
C++ library to the process's stdout when the first instance is made, before any option can turn
it off, so that construction runs with file descriptor 1 sent to /dev/null."""
from __future__ import annotations

import os
import sys


def quiet_highs():
    """A highspy.Highs with output_flag off, made without printing the library's banner."""
    import highspy  # ~0.2 s, kept off the import path of callers that never need it
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h
