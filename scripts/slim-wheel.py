"""Rewrite a wheel without what vlabench never loads from it, for a device machine that gets its wheels carried (at
most 64 MiB a call, no network). Usage: slim-wheel.py robosuite|ray IN.whl OUT_DIR

- robosuite 1.4.0 (~190 MB, mostly meshes of seven robots and pybullet data): LIBERO builds every scene with a
  Panda on a Rethink mount. All code and XML files stay, and of the other asset files only those the Panda, its
  gripper and the mount reference.
- ray (~79 MB for cp312): `vlabench eval --ray` uses Ray Core (`ray start`, tasks, a job's runtime_env). The Java
  jars (32 MB), the dashboard's web client and the libraries built on Ray Core (data, train, tune, serve, rllib,
  llm, air) go, and the native executables and libraries, which Ray ships with their symbols, are stripped
  (`strip`): code is unchanged, only the symbol tables go.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

ROBOSUITE_ASSETS = "robosuite/models/assets/"
ROBOSUITE_USED_XML = ("robots/panda/robot.xml", "grippers/panda_gripper.xml", "mounts/rethink_mount.xml", "base.xml")
RAY_UNUSED = ("ray/jars/", "ray/dashboard/client/", "ray/data/", "ray/train/", "ray/tune/", "ray/serve/",
              "ray/rllib/", "ray/llm/", "ray/air/")  # fmt: skip
ELF = b"\x7fELF"


def robosuite_keep(wheel: zipfile.ZipFile) -> Callable[[str], bool]:
    keep = set()
    for xml in ROBOSUITE_USED_XML:
        text = wheel.read(ROBOSUITE_ASSETS + xml).decode()
        folder = posixpath.dirname(ROBOSUITE_ASSETS + xml)
        for ref in re.findall(r'file="([^"]+)"', text):
            keep.add(posixpath.normpath(posixpath.join(folder, ref)))
    return lambda n: not n.startswith(ROBOSUITE_ASSETS) or n.endswith(".xml") or n.endswith("/") or n in keep


def ray_keep(wheel: zipfile.ZipFile) -> Callable[[str], bool]:
    return lambda n: not n.startswith(RAY_UNUSED)


def stripped(data: bytes) -> bytes:
    """An ELF file without its symbol tables (`strip`); anything else as it is."""
    if not data.startswith(ELF):
        return data
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        subprocess.run(["strip", "--strip-unneeded", f.name], check=True)
        return Path(f.name).read_bytes()


def rewrite(src: Path, out_dir: Path, keep_of: Callable, transform: Callable[[bytes], bytes]) -> Path:
    """The wheel `src` as OUT_DIR/<its name>, with the files `keep_of(wheel)` keeps, each passed through `transform`,
    and a RECORD of their new hashes and sizes."""
    out = out_dir / src.name
    with zipfile.ZipFile(src) as wheel:
        keep = keep_of(wheel)
        names = [n for n in wheel.namelist() if keep(n)]
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = []
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as slim:
            for name in names:
                if name == record_name:
                    continue
                data = transform(wheel.read(name))
                slim.writestr(wheel.getinfo(name), data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append(f"{name},sha256={digest},{len(data)}")
            rows.append(f"{record_name},,")
            slim.writestr(record_name, "\n".join(rows) + "\n")
        dropped = len(wheel.namelist()) - len(names)
    print(f"{out}: {src.stat().st_size / 1e6:.1f} MB -> {out.stat().st_size / 1e6:.1f} MB ({dropped} files dropped)")
    return out


def main(kind: str, src: str, out_dir: str) -> None:
    if kind == "robosuite":
        rewrite(Path(src), Path(out_dir), robosuite_keep, lambda data: data)
    elif kind == "ray":
        rewrite(Path(src), Path(out_dir), ray_keep, stripped)
    else:
        sys.exit(f"slim-wheel.py: expected robosuite or ray, got {kind!r}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: slim-wheel.py robosuite|ray IN.whl OUT_DIR")
    main(*sys.argv[1:])
