"""The zoo cache in unusual states: FAITHBENCH_CACHE naming a file, and a cache the build cannot write, are one line
each (a read-only folder is simulated: the tests may run as root, who writes anywhere)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from faithbench.errors import UserError
from faithbench.models import zoo


def test_a_cache_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path / "file"))
    with pytest.raises(UserError, match=r"the cache .*file \(FAITHBENCH_CACHE\) is a file, not a folder"):
        zoo.cache_dir()


def test_a_build_into_an_unwritable_cache_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path / "ro"))

    def refuse(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(UserError, match=r"cannot build zoo model 'cnn_mnist': the cache .*ro/zoo is not writable "
                       r"\(Permission denied\); set FAITHBENCH_CACHE"):  # fmt: skip
        with zoo._build_lock("cnn_mnist"):
            pass
