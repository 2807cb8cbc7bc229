"""Simulator setup that must happen before MuJoCo, robosuite or LIBERO are first imported.

- Rendering: MuJoCo reads MUJOCO_GL (and PyOpenGL PYOPENGL_PLATFORM) once, at import. EGL uses the NVIDIA
  driver on GPU machines and Mesa (software) on CPUs; OSMesa is the other CPU option.
- LIBERO's config: importing `libero.libero` asks for a config on standard input unless
  LIBERO_CONFIG_PATH names a folder with a `config.yaml`; we write one in our cache.
- Assets: LIBERO's environments read `<libero package>/libero/libero/assets` (and download the assets
  from the Hugging Face Hub into `~/.cache/libero/assets` when that folder is missing). We make that path a
  symbolic link to the assets chosen here: a folder or archive given by the user (unpacked once into our
  cache, never next to the archive), several archives separated by os.pathsep (unpacked in that order into
  one cached folder: the spatial/goal test archive, then the libero_object/libero_10 addition over it), or
  LIBERO's own download.

`prepare()` sets the variables in this process; worker processes started afterwards inherit them.
"""

from __future__ import annotations

import ctypes.util
import hashlib
import importlib.util
import os
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from models.extras import SetupError, pip_install

ASSETS_ENV = "VLABENCH_LIBERO_ASSETS"
CACHE_ENV = "VLABENCH_CACHE"
SIM_PACKAGES = ("mujoco", "robosuite", "bddl", "libero")
RENDERERS = ("egl", "osmesa")
# The asset folders every LIBERO scene needs; used to recognise an assets folder.
ASSET_SUBDIRS = ("scenes", "stable_scanned_objects")
ARCHIVE_SUFFIXES = (".tar.xz", ".tar.gz", ".tgz", ".tar", ".zip")


class SimError(SetupError):
    """A simulator setup problem, stated in one line with what to do about it."""


@dataclass(frozen=True)
class SimSetup:
    renderer: str
    assets: str  # the folder LIBERO's assets path points to
    assets_source: str  # what the user gave (folder or archive), or "libero-download" / "installed"
    libero_config: str  # LIBERO_CONFIG_PATH
    env: dict  # the environment variables set for the simulator

    def as_dict(self) -> dict:
        return {
            "renderer": self.renderer,
            "assets": self.assets,
            "assets_source": self.assets_source,
            "libero_config": self.libero_config,
        }


def missing_packages() -> list[str]:
    return [name for name in SIM_PACKAGES if importlib.util.find_spec(name) is None]


def require_packages():
    missing = missing_packages()
    if missing:
        raise SimError(f"LIBERO evaluation needs {', '.join(missing)}: install vlabench[sim]: {pip_install('sim')}")


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "vlabench")


def _nvidia_gpu_visible() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia").exists()


def choose_renderer(requested: str | None = None) -> str:
    """The MuJoCo GL backend: the one asked for, else $MUJOCO_GL, else EGL where an NVIDIA GPU or Mesa EGL
    is present, else OSMesa."""
    choice = requested or os.environ.get("MUJOCO_GL")
    if choice:
        if choice not in RENDERERS:
            raise SimError(f"renderer: expected one of {', '.join(RENDERERS)}, got {choice!r}")
        return choice
    if _nvidia_gpu_visible() or ctypes.util.find_library("EGL"):
        return "egl"
    if ctypes.util.find_library("OSMesa"):
        return "osmesa"
    raise SimError("no OpenGL for offscreen rendering: install libegl1 and libgl1-mesa-dri (EGL) or libosmesa6")


def libero_package_dir() -> Path:
    """`<site-packages>/libero/libero`, found without importing it (the import would read the config)."""
    spec = importlib.util.find_spec("libero")
    if spec is None or not spec.submodule_search_locations:
        raise SimError(f"LIBERO is not installed: install vlabench[sim]: {pip_install('sim')}")
    return Path(list(spec.submodule_search_locations)[0]) / "libero"


def write_libero_config() -> Path:
    """A config folder for LIBERO pointing at the installed package's BDDL files and initial states."""
    pkg = libero_package_dir()
    folder = cache_dir() / "libero-config"
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(
        f"{key}: {value}\n"
        for key, value in (
            ("benchmark_root", pkg),
            ("bddl_files", pkg / "bddl_files"),
            ("init_states", pkg / "init_files"),
            ("datasets", cache_dir() / "libero-datasets"),
            ("assets", pkg / "assets"),
        )
    )
    path = folder / "config.yaml"
    if not path.exists() or path.read_text() != text:
        tmp = folder / f".config.yaml.{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, path)  # concurrent evals never read a half-written config
    return folder


def _is_assets_dir(path: Path) -> bool:
    return all((path / sub).is_dir() for sub in ASSET_SUBDIRS)


def _find_assets_dir(root: Path) -> Path | None:
    """`root` itself or its `assets/` child, whichever holds the LIBERO asset folders."""
    for candidate in (root, root / "assets"):
        if _is_assets_dir(candidate):
            return candidate
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _extract(archive: Path, into: Path) -> None:
    """Extract one archive into `into` (files of a later archive replace an earlier one's)."""
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(into)
        return
    with tarfile.open(archive) as t:
        if hasattr(tarfile, "data_filter"):
            t.extractall(into, filter="data")  # no links out of the folder, no device files
        else:  # Python without extraction filters: check the members ourselves
            for member in t.getmembers():
                if not (member.isfile() or member.isdir()) or member.name.startswith("/") or ".." in member.name:
                    raise SimError(f"{archive}: refusing archive member {member.name!r}")
            t.extractall(into)


def _unpack(archives: list[Path]) -> Path:
    """Unpack assets archives once into the cache, each over the ones before it (the spatial/goal archive,
    then the libero_object/libero_10 addition), into one folder keyed by their hashes; returns the assets
    folder. One archive keeps the key it always had."""
    hashes = [_sha256(a) for a in archives]
    key = hashes[0] if len(hashes) == 1 else hashlib.sha256("+".join(hashes).encode()).hexdigest()
    target = cache_dir() / "libero-assets" / key[:16]
    found = _find_assets_dir(target) if target.is_dir() else None
    if found:
        return found
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=target.parent))
    try:
        for archive in archives:
            _extract(archive, tmp)
        if _find_assets_dir(tmp) is None:
            raise SimError(
                f"{' + '.join(map(str, archives))}: expected an archive of LIBERO assets "
                f"(folders {', '.join(ASSET_SUBDIRS)}), found none"
            )
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # another process unpacked it first: use theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _find_assets_dir(target)


def resolve_assets(assets: str | None) -> tuple[Path, str] | None:
    """The assets folder for `assets` (or $VLABENCH_LIBERO_ASSETS): (folder, source), or None if neither is set.
    A folder, an archive, or several archives separated by os.pathsep (':' on Linux), unpacked in that order
    into one folder: the spatial/goal archive, then the libero_object/libero_10 addition unpacked over it."""
    given = assets or os.environ.get(ASSETS_ENV)
    if not given:
        return None
    parts = [p for p in given.split(os.pathsep) if p]
    paths = [Path(p).expanduser() for p in parts]
    if len(paths) == 1 and paths[0].is_dir():
        found = _find_assets_dir(paths[0])
        if found is None:
            raise SimError(f"{paths[0]}: expected a LIBERO assets folder (with {', '.join(ASSET_SUBDIRS)}), found none")
        return found.resolve(), str(paths[0])
    for path, part in zip(paths, parts):
        if not (path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)):
            what = (
                "no such file or folder"
                if not path.exists()
                else "a folder: several assets must all be archives"
                if path.is_dir()
                else "another kind of file"
            )
            raise SimError(
                f"LIBERO assets: expected a folder, an archive ({', '.join(ARCHIVE_SUFFIXES)}) or archives "
                f"separated by {os.pathsep!r}, got {part!r} ({what})"
            )
    if not paths:
        raise SimError(f"LIBERO assets: expected a folder or an archive, got {given!r}")
    return _unpack([p.resolve() for p in paths]), given


def link_assets(folder: Path) -> Path:
    """Point `<libero package>/libero/assets` at `folder` (idempotent; replaces an older link of ours)."""
    link = libero_package_dir() / "assets"
    if link.is_symlink():
        if Path(os.readlink(link)) == folder:
            return link
    elif link.exists():
        raise SimError(
            f"{link} is a real folder (assets installed with LIBERO); it cannot be replaced by "
            f"{folder}: remove it, or run without --assets/{ASSETS_ENV} to use it"
        )
    tmp = link.with_name(f".assets-{os.getpid()}")
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(folder, target_is_directory=True)
        os.replace(tmp, link)  # atomic: a concurrent reader sees the old link or the new one
    except OSError as e:
        raise SimError(
            f"cannot link LIBERO's assets path {link} to {folder}: {e.strerror or e} "
            "(the LIBERO install must be writable, e.g. a virtual environment)"
        ) from None
    return link


def _libero_download() -> Path:
    """LIBERO's own download of the assets (Hugging Face Hub) into its cache."""
    try:
        from libero.libero.utils.download_utils import download_assets_from_huggingface

        folder = Path(download_assets_from_huggingface())
    except Exception as e:  # no network, no huggingface_hub, ...: say what to do instead
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SimError(
            f"no LIBERO assets: LIBERO could not download them ({reason}); pass --assets "
            f"FOLDER_OR_ARCHIVE or set {ASSETS_ENV}"
        ) from None
    found = _find_assets_dir(folder)
    if found is None:
        raise SimError(f"LIBERO's download at {folder} has no asset folders; pass --assets or set {ASSETS_ENV}")
    return found


def use_libero_config() -> Path:
    """LIBERO's task tables readable in this process without the rest of prepare() (no renderer, no assets);
    returns the config folder."""
    folder = write_libero_config()
    os.environ["LIBERO_CONFIG_PATH"] = str(folder)
    return folder


def prepare(assets: str | None = None, renderer: str | None = None) -> SimSetup:
    """Set up rendering, LIBERO's config and its assets in this process (and so in workers started later)."""
    require_packages()
    backend = choose_renderer(renderer)
    config = use_libero_config()
    env = {
        "MUJOCO_GL": backend,
        "PYOPENGL_PLATFORM": backend,
        "LIBERO_CONFIG_PATH": str(config),
        # robosuite caches numba kernels; keep the cache writable wherever robosuite is installed
        "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR") or str(cache_dir() / "numba"),
    }
    os.environ.update(env)
    resolved = resolve_assets(assets)
    if resolved is not None:
        folder, source = resolved
        link_assets(folder)
    else:
        link = libero_package_dir() / "assets"
        if link.exists() and not link.is_symlink():
            folder, source = link, "installed"
        else:  # no assets given: LIBERO's download (a link left by an earlier eval must not be reused silently)
            folder, source = _libero_download(), "libero-download"
            link_assets(folder)
    return SimSetup(renderer=backend, assets=str(folder), assets_source=source, libero_config=str(config), env=env)
