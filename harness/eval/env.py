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
        tasks.append(
            TaskInfo(
                suite=suite,
                index=i,
                name=task.name,
                language=task.language,
                bddl_file=os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file),
                init_states_file=os.path.join(
                    get_libero_path("init_states"), task.problem_folder, task.init_states_file
                ),
            )
        )
    return tasks


def _numpy_globals() -> dict:
    import _codecs

    try:  # numpy 2 moved numpy.core to numpy._core (files pickled under either name load in both)
        from numpy._core.multiarray import _reconstruct as reconstruct
        from numpy._core.multiarray import scalar
    except ImportError:
        from numpy.core.multiarray import _reconstruct as reconstruct
        from numpy.core.multiarray import scalar

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
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: initial-state files hold numpy arrays only"
            ) from None

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


def make_env(task: TaskInfo, resolution: int = RENDER_SIZE, seed: int = SEED, cameras: bool = True):
    """LIBERO's offscreen environment for a task, seeded as openpi does (the seed moves objects even
    when an initial state is loaded afterwards). Without `cameras` (a policy that needs no images) it has no
    renderer at all: same model and physics, and each reset skips creating a GL context (~1 s)."""
    from libero.libero.envs import OffScreenRenderEnv
    from libero.libero.envs.env_wrapper import ControlEnv

    if cameras:
        env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=resolution, camera_widths=resolution)
    else:
        env = ControlEnv(
            bddl_file_name=task.bddl_file, has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False
        )
    env.new_property_samplers = list(env.env.object_property_initializers)  # for reset_as_new
    env.seed(seed)
    return env


def reset_as_new(env, seed: int | None = None):
    """Seed and reset `env` exactly as a newly built environment's first reset would be.

    LIBERO appends a task's property samplers (a drawer open or closed, a stove on or off: the :init
    predicates open/close/turnon/turnoff) at every hard reset and never drops the earlier ones. Each reset
    draws once per sampler from numpy's generator before it places the furniture, so with the same seed the
    N-th reset of an environment puts the cabinet and the stove a few millimetres away from where its first
    reset does: enough to change an episode's outcome, which then depended on how many episodes the worker
    had run before (libero_spatial task 4, the bowl in the open drawer). The list is cut back to what a new
    environment holds; the reset rebuilds everything else (a hard reset loads a new model, robot, gripper
    and controller)."""
    samplers = getattr(env, "new_property_samplers", None)
    if samplers is not None:
        env.env.object_property_initializers[:] = samplers
    if seed is not None:
        env.seed(seed)
    return env.reset()
