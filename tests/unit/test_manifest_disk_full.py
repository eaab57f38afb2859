"""A disk that fills while the manifest is written: no temporary file stays behind, the old
manifest stays whole, and the controller says so in one line naming
``trainer.profiler.output_dir`` and the free space."""

from __future__ import annotations

import errno
import os
import time

import pytest

from tests.unit.test_controller import controller_of, plan_of, run
from verlprof import manifest as manifest_module
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import Manifest, free_space, read_manifest, write_manifest


class _FullDisk:
    """A file whose writes fail as on a full disk (what ENOSPC does to ``write``)."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


def fill_disk(monkeypatch) -> None:
    """From now on, every manifest write fails with ENOSPC."""
    real = os.fdopen
    monkeypatch.setattr(manifest_module.os, "fdopen",
                        lambda fd, *a, **kw: _FullDisk(real(fd, *a, **kw)))


def leftovers(directory) -> list:
    return sorted(name for name in os.listdir(directory) if name.startswith(".manifest."))


def test_a_failed_write_leaves_no_temporary_file_and_the_old_manifest_whole(tmp_path,
                                                                             monkeypatch):
    out = str(tmp_path)
    old = Manifest(tool="torch", output_dir=out, step_windows=((1,),), reports=())
    write_manifest(old, out)
    before = (tmp_path / "manifest.json").read_text()
    fill_disk(monkeypatch)
    with pytest.raises(OSError) as info:
        write_manifest(Manifest(tool="torch", output_dir=out, step_windows=((2,),),
                                reports=()), out)
    assert info.value.errno == errno.ENOSPC
    assert leftovers(out) == []
    assert (tmp_path / "manifest.json").read_text() == before
    assert read_manifest(out).step_windows == ((1,),)


def test_the_controller_names_the_key_and_the_free_space_in_one_line(tmp_path, monkeypatch):
    controller, ranks, _ = controller_of(plan_of(tmp_path, [1]))
    run(controller, ranks, [1])
    fill_disk(monkeypatch)
    started = time.monotonic()
    with pytest.raises(ProfilingRuntimeError) as info:
        controller.finalize()
    assert time.monotonic() - started < 10  # bounded: no retry, no wait on a full disk
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"trainer.profiler.output_dir: cannot write manifest.json to "
                              f"{tmp_path}: No space left on device (")
    assert message.endswith(" free)")
    assert leftovers(tmp_path) == []


def test_free_space_reads_like_a_size():
    assert free_space("/").endswith(" free")
    assert free_space("/no/such/dir/at/all") == "free space unknown"
