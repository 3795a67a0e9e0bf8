"""Atomic writes keep the permissions a user expects: the umask for new files, the old mode for replaced ones."""

from __future__ import annotations

import os

from privft.io import atomic_write_text


def test_new_files_follow_the_umask_and_replaced_files_keep_their_mode(tmp_path):
    previous = os.umask(0o077)  # a user keeping private texts (split manifests hold them) away from others
    try:
        manifest = atomic_write_text(tmp_path / "split.json", "{}")
    finally:
        os.umask(previous)
    assert manifest.stat().st_mode & 0o777 == 0o600
    manifest.chmod(0o640)
    atomic_write_text(manifest, '{"members": []}')
    assert manifest.stat().st_mode & 0o777 == 0o640 and manifest.read_text() == '{"members": []}'
