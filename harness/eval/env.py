"""LIBERO tasks, their stored initial states and environments (import only after sim.prepare()).

The `*.pruned_init` initial-state files are numpy arrays pickled inside a torch zip file. torch >= 2.6
refuses them with weights-only loading; instead of turning that safety off, `read_init_states` unpickles
them with an unpickler that can build numpy arrays and nothing else.
"""
from __future__ import annotations

import io
import os
import pickle
import zipfile
from dataclasses import dataclass

import numpy as np

from .protocol import RENDER_SIZE, SEED


@dataclass(frozen=True)
class TaskInfo:
    suite: str
    index: int
    name: str
    language: str  # the instruction given to the policy
    bddl_file: str
    init_states_file: str


def suite_tasks(suite: str) -> list[TaskInfo]:
    """The tasks of a LIBERO suite in LIBERO's standard order."""
    from libero.libero import benchmark, get_libero_path

    benchmarks = benchmark.get_benchmark_dict()
    if suite not in benchmarks:
        raise ValueError(f"unknown LIBERO suite {suite!r}; known: {', '.join(sorted(benchmarks))}")
    bench = benchmarks[suite]()
    tasks = []
    for i in range(bench.get_num_tasks()):
        task = bench.get_task(i)
        tasks.append(TaskInfo(
            suite=suite, index=i, name=task.name, language=task.language,
            bddl_file=os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file),
            init_states_file=os.path.join(get_libero_path("init_states"), task.problem_folder,
                                          task.init_states_file)))
    return tasks


def _numpy_globals() -> dict:
    import _codecs

    try:  # numpy 2 moved numpy.core to numpy._core (files pickled under either name load in both)
        from numpy._core.multiarray import _reconstruct as reconstruct, scalar
    except ImportError:
        from numpy.core.multiarray import _reconstruct as reconstruct, scalar

    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): _codecs.encode}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = reconstruct
        allowed[(module, "scalar")] = scalar
    return allowed


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays (and the dtypes, scalars and bytes they need); any other object is refused."""

    _allowed = _numpy_globals()

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: initial-state files hold numpy "
                                         "arrays only") from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent reference (torch tensor storage) in an initial-state file")


def read_init_states(path) -> np.ndarray:
    """The initial states of one task, [trials, state size], from a torch-zip or plain pickle file."""
    with open(path, "rb") as f:
        data = f.read()
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pkl) != 1:
                raise ValueError(f"{path}: expected one data.pkl in the torch zip file, found {len(pkl)}")
            data = z.read(pkl[0])
    states = _NumpyOnlyUnpickler(io.BytesIO(data)).load()
    states = np.asarray(states)
    if states.ndim != 2:
        raise ValueError(f"{path}: expected a [trials, state] array, got shape {states.shape}")
    return states


def make_env(task: TaskInfo, resolution: int = RENDER_SIZE, seed: int = SEED):
    """LIBERO's offscreen environment for a task, seeded as openpi does (the seed moves objects even
    when an initial state is loaded afterwards)."""
    from libero.libero.envs import OffScreenRenderEnv

    env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=resolution, camera_widths=resolution)
    env.seed(seed)
    return env
