"""Artefacts are written whole or not at all.

Each file is written to a temporary file in its own folder, then renamed over its name (atomic
within a file system): a kill in the middle leaves the previous file or none, never a truncated
PNG or half a JSON. The temporary file's name starts with a dot and ends in ``.tmp``. What is
not a regular file (``/dev/stdout``, a pipe) is written in place.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["atomic_path", "write_text"]


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; renamed to ``path`` when the block
    ends without an exception, removed otherwise. Permissions as a plain write would give."""
    path = Path(path)
    if path.exists() and not path.is_file():  # /dev/stdout, a named pipe: written in place
        yield path
        return
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: Path | str, text: str, encoding: str = "utf-8") -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
