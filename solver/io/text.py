"""Reading a text file with an error that names it: one InstanceError for a missing,
unreadable or non-UTF-8 file, never a bare UnicodeDecodeError."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import InstanceError


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of `path`; InstanceError "<path>: <what> ..." when it cannot be read.

    what: the kind of file, for the message ("instance file", "layer table", ...)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InstanceError(f"{path}: cannot read {what}: file not found") from None
    except IsADirectoryError:
        raise InstanceError(f"{path}: cannot read {what}: it is a folder, not a file") from None
    except OSError as e:
        raise InstanceError(f"{path}: cannot read {what}: {e.strerror}") from None
    return decode(data, path, what)


def decode(data: bytes, path: str | Path, what: str) -> str:
    """`data` decoded as UTF-8 (a leading byte-order mark dropped); InstanceError naming the
    file, the byte offset and the byte otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InstanceError(f"{path}: {what} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
                            "(save the file as UTF-8)") from None


def repeated_columns(header: Sequence[str]) -> list[str]:
    """The names that occur more than once in a CSV header, in first-seen order: a repeated
    column would make the reader keep one of the two silently."""
    seen: set[str] = set()
    return list(dict.fromkeys(h for h in header if h in seen or seen.add(h)))
