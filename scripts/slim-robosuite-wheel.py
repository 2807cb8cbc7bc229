"""Rewrite robosuite's wheel without the assets LIBERO never loads, for a machine that gets its wheels carried.

robosuite 1.4.0's wheel is ~190 MB, mostly meshes of seven robots and pybullet data. LIBERO builds every scene
with a Panda on a Rethink mount: this keeps all code and XML files, and of the other asset files only those
the Panda, its gripper and the mount reference. Usage: slim-robosuite-wheel.py IN.whl OUT_DIR
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import re
import sys
import zipfile
from pathlib import Path

ASSETS = "robosuite/models/assets/"
USED_XML = ("robots/panda/robot.xml", "grippers/panda_gripper.xml", "mounts/rethink_mount.xml", "base.xml")


def referenced_files(wheel: zipfile.ZipFile) -> set[str]:
    keep = set()
    for xml in USED_XML:
        text = wheel.read(ASSETS + xml).decode()
        folder = posixpath.dirname(ASSETS + xml)
        for ref in re.findall(r'file="([^"]+)"', text):
            keep.add(posixpath.normpath(posixpath.join(folder, ref)))
    return keep


def main(src: str, out_dir: str) -> None:
    src_path = Path(src)
    out = Path(out_dir) / src_path.name
    with zipfile.ZipFile(src_path) as wheel:
        keep = referenced_files(wheel)
        names = [
            n
            for n in wheel.namelist()
            if not n.startswith(ASSETS) or n.endswith(".xml") or n.endswith("/") or n in keep
        ]
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = []
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as slim:
            for name in names:
                if name == record_name:
                    continue
                data = wheel.read(name)
                slim.writestr(wheel.getinfo(name), data, compress_type=zipfile.ZIP_DEFLATED)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append(f"{name},sha256={digest},{len(data)}")
            rows.append(f"{record_name},,")
            slim.writestr(record_name, "\n".join(rows) + "\n")
    dropped = len(wheel.namelist()) - len(names)
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB ({dropped} unused asset files dropped)")


if __name__ == "__main__":
    main(*sys.argv[1:])
