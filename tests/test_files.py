"""Artefacts are written whole or not at all (``sweetspot._files``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sweetspot._files import atomic_path, write_text


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "trials.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half of the ne")
        raise RuntimeError("killed while writing")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trials.json"]


def test_a_finished_write_replaces_the_file_with_plain_permissions(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    write_text(target, "<html>new</html>")
    assert target.read_text() == "<html>new</html>"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_what_is_not_a_regular_file_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_text(fifo, "through the pipe")
        assert os.read(reader, 100) == b"through the pipe"
        assert stat.S_ISFIFO(fifo.stat().st_mode)
    finally:
        os.close(reader)
