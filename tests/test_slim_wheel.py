"""scripts/slim-wheel.py: a wheel rewritten for a device machine drops what vlabench never loads, keeps the rest
byte for byte (native files only stripped of their symbols, still runnable) with a RECORD of the new hashes, and
installs with pip."""

import base64
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("slim_wheel", ROOT / "scripts" / "slim-wheel.py")
slim_wheel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slim_wheel)

NAME = "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"
DIST = "ray-2.60.0.dist-info"
KEPT = {
    "ray/__init__.py": b"__version__ = '2.60.0'\n",
    "ray/dashboard/agent.py": b"# the agent every node starts\n",
    "ray/_private/worker.py": b"# core\n",
}
DROPPED = {
    "ray/jars/ray_dist.jar": b"java" * 100,
    "ray/dashboard/client/build/main.js": b"js" * 100,
    "ray/data/dataset.py": b"# ray data\n",
    "ray/rllib/algorithm.py": b"# rllib\n",
}


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, native: bytes) -> Path:
    files = {**KEPT, **DROPPED, "ray/core/src/ray/raylet/raylet": native}
    files[f"{DIST}/METADATA"] = b"Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n"
    files[f"{DIST}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux2014_x86_64\n"
    )
    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items()) + f"{DIST}/RECORD,,\n"
    path = folder / NAME
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{DIST}/RECORD", record)
    return path


@pytest.mark.skipif(shutil.which("objcopy") is None, reason="needs binutils (strip, objcopy)")
def test_a_slimmed_ray_wheel_keeps_ray_core_runs_its_stripped_binaries_and_installs(tmp_path):
    # a real ELF executable with a symbol of ours in its symbol table, which stripping must remove
    subprocess.run(
        ["objcopy", "--add-symbol", "vlabench_marker=0", shutil.which("true"), tmp_path / "true"], check=True
    )
    native = (tmp_path / "true").read_bytes()
    assert b"vlabench_marker" in native
    src = make_wheel(tmp_path, native)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    slim = slim_wheel.rewrite(src, out_dir, slim_wheel.ray_keep, slim_wheel.stripped)
    with zipfile.ZipFile(slim) as z:
        names = set(z.namelist())
        assert not names & set(DROPPED)
        assert all(z.read(n) == data for n, data in KEPT.items())
        binary = z.read("ray/core/src/ray/raylet/raylet")
        record = {row.split(",")[0]: row.split(",")[1:] for row in z.read(f"{DIST}/RECORD").decode().splitlines()}
    assert binary.startswith(b"\x7fELF") and b"vlabench_marker" not in binary and len(binary) < len(native)
    assert record["ray/core/src/ray/raylet/raylet"] == [digest(binary), str(len(binary))]
    assert set(record) == names  # every file listed, none that is gone
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(slim)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed = site / "ray/core/src/ray/raylet/raylet"
    installed.chmod(0o755)
    assert subprocess.run([str(installed)]).returncode == 0  # the stripped `true` still runs
    assert not (site / "ray/jars").exists() and (site / "ray/dashboard/agent.py").exists()


def test_robosuite_keeps_code_xml_and_the_assets_the_panda_references(tmp_path):
    assets = slim_wheel.ROBOSUITE_ASSETS
    files = {
        "robosuite/__init__.py": b"",
        assets + "robots/panda/robot.xml": b'<mujoco><mesh file="meshes/link0.stl"/></mujoco>',
        assets + "robots/panda/meshes/link0.stl": b"panda mesh",
        assets + "robots/sawyer/meshes/base.stl": b"sawyer mesh",
        assets + "robots/sawyer/robot.xml": b"<mujoco/>",
        assets + "grippers/panda_gripper.xml": b"<mujoco/>",
        assets + "mounts/rethink_mount.xml": b"<mujoco/>",
        assets + "base.xml": b"<mujoco/>",
        "robosuite-1.4.0.dist-info/RECORD": b"",
    }
    src = tmp_path / "robosuite-1.4.0-py3-none-any.whl"
    with zipfile.ZipFile(src, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    slim = slim_wheel.rewrite(src, out_dir, slim_wheel.robosuite_keep, lambda data: data)
    names = set(zipfile.ZipFile(slim).namelist())
    assert assets + "robots/panda/meshes/link0.stl" in names and assets + "robots/sawyer/robot.xml" in names
    assert assets + "robots/sawyer/meshes/base.stl" not in names
