"""LIBERO assets named by --assets or VLABENCH_LIBERO_ASSETS: several archives separated by os.pathsep are
unpacked, in order, into one cached folder (the spatial/goal archive, then the libero_object/libero_10
addition over it). No simulator needed."""

import io
import os
import tarfile

import pytest

from harness.eval import sim


def _archive(path, files: dict):
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_several_archives_unpack_into_one_folder_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv(sim.CACHE_ENV, str(tmp_path / "cache"))
    base = _archive(
        tmp_path / "base.tar.gz",
        {"assets/scenes/a.xml": "base", "assets/stable_scanned_objects/bowl.xml": "bowl", "assets/x.txt": "old"},
    )
    extra = _archive(
        tmp_path / "extra.tar.gz", {"assets/stable_scanned_objects/basket.xml": "basket", "assets/x.txt": "new"}
    )
    folder, source = sim.resolve_assets(f"{base}{os.pathsep}{extra}")
    assert source == f"{base}{os.pathsep}{extra}"
    assert (folder / "scenes" / "a.xml").read_text() == "base"
    assert (folder / "stable_scanned_objects" / "basket.xml").read_text() == "basket"
    assert (folder / "x.txt").read_text() == "new"  # a later archive's file wins
    again, _ = sim.resolve_assets(f"{base}{os.pathsep}{extra}")  # unpacked once: the cached folder
    assert again == folder
    alone, _ = sim.resolve_assets(str(base))  # one archive keeps its own folder
    assert alone != folder and not (alone / "stable_scanned_objects" / "basket.xml").exists()
    monkeypatch.setenv(sim.ASSETS_ENV, f"{base}{os.pathsep}{extra}")
    assert sim.resolve_assets(None)[0] == folder


def test_several_assets_must_all_be_archives(tmp_path, monkeypatch):
    monkeypatch.setenv(sim.CACHE_ENV, str(tmp_path / "cache"))
    base = _archive(tmp_path / "base.tar.gz", {"assets/scenes/a.xml": "", "assets/stable_scanned_objects/b": ""})
    with pytest.raises(sim.SimError, match=r"got '.*missing.tar.xz' \(no such file or folder\)"):
        sim.resolve_assets(f"{base}{os.pathsep}{tmp_path / 'missing.tar.xz'}")
    with pytest.raises(sim.SimError, match="several assets must all be archives"):
        sim.resolve_assets(f"{base}{os.pathsep}{tmp_path}")
