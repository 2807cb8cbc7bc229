"""Privileged simulator state for scripted policies (the expert): what a demonstrator standing at the table
knows, read from a LIBERO (robosuite) environment in the worker and sent with each observation.

`SimStateReader(env).read()` returns plain numpy arrays and strings (it travels through a pipe):
- `episode` (unique per episode in this process tree) and `step` (0 at the first read of the episode), for a
  policy that keeps per-episode memory while several workers' episodes interleave;
- `eef_pos` and `eef_mat` (3x3 rotation: its x axis is the line along which the fingers close, z points
  from the hand to the fingertips) of the grip site between the finger pads, `gripper_qpos` (the fingers),
  `robot_base` (the arm's base position: how far it reaches);
- `bodies`: per task object and fixture, `pos` and `mat` (3x3 rotation) of its root body, `aabb` (world
  [min xyz, max xyz] over its collision geoms) and `local_aabb` (the same in the root body's frame);
- `obstacles`: every collision geom of the objects and fixtures (not the table), for clearance checks:
  `owner` (object or fixture name per row), `aabb` [n, 6] (world bounding box) and the oriented box it
  bounds: `centre` [n, 3], `rot` [n, 3, 3] (geom frame to world), `half` [n, 3] (half sizes in that frame);
- `sites`: per region of the task (drawer insides, stove burner, table regions), `pos`, `mat` and `size`;
- `goal`: the BDDL goal as parsed by the environment, e.g. [["on", "akita_black_bowl_1", "plate_1"]].

Nothing here imports robosuite or MuJoCo: it reads the environment object it is given.
"""

from __future__ import annotations

import itertools
import os

import numpy as np

_episodes = itertools.count()


class SimStateReader:
    """Reads the privileged state of one LIBERO environment after its reset (a hard reset builds a new
    model, so a reader belongs to one episode)."""

    def __init__(self, env):
        inner = getattr(env, "env", env)  # LIBERO's ControlEnv wraps the robosuite environment
        self.inner = inner
        model = inner.sim.model._model
        self.model = model
        self.data = inner.sim.data._data
        self.grip_site = model.site("gripper0_grip_site").id
        self.robot_base = model.body("robot0_base").id
        self.finger_qpos = [
            model.joint(name).qposadr[0] for name in ("gripper0_finger_joint1", "gripper0_finger_joint2")
        ]
        children: dict[int, list[int]] = {}
        for body in range(1, model.nbody):
            children.setdefault(int(model.body_parentid[body]), []).append(body)
        collides = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
        self.names, self.roots, owner, geoms = [], [], [], []
        for name, body in inner.obj_body_id.items():
            if name in getattr(inner, "fixtures_dict", {}) and type(inner.fixtures_dict[name]).__name__ == "TableArena":
                continue
            subtree, stack = [], [body]
            while stack:
                b = stack.pop()
                subtree.append(b)
                stack.extend(children.get(b, []))
            own = [g for g in np.flatnonzero(collides) if model.geom_bodyid[g] in subtree]
            if not own:
                continue  # the table and other bodies without collision geoms
            self.names.append(name)
            self.roots.append(body)
            geoms.extend(own)
            owner.extend([len(self.names) - 1] * len(own))
        self.geoms = np.asarray(geoms, dtype=int)
        self.owner = np.asarray(owner, dtype=int)
        self.sites = {}
        for name, site in getattr(inner, "object_sites_dict", {}).items():
            try:
                self.sites[name] = (model.site(name).id, np.asarray(getattr(site, "size", (0, 0, 0)), dtype=float))
            except KeyError:
                continue  # a region without a site of its own
        self.goal = [list(map(str, state)) for state in inner.parsed_problem.get("goal_state", [])]
        self.episode, self.step = f"{os.getpid()}-{next(_episodes)}", 0

    def geom_boxes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The collision geoms' boxes in the world, from MuJoCo's boxes in each geom's frame: axis-aligned
        [n, 6] (min xyz, max xyz) and oriented (centre [n, 3], rotation [n, 3, 3], half sizes [n, 3]); the
        drawer walls of a turned cabinet are thin oriented boxes but wide axis-aligned ones."""
        m, d = self.model, self.data
        local = m.geom_aabb[self.geoms]  # centre (3), half sizes (3) in the geom's frame
        rot = d.geom_xmat[self.geoms].reshape(-1, 3, 3)
        centre = d.geom_xpos[self.geoms] + np.einsum("nij,nj->ni", rot, local[:, :3])
        half = np.einsum("nij,nj->ni", np.abs(rot), local[:, 3:])
        return np.concatenate([centre - half, centre + half], axis=1), centre, rot, local[:, 3:].copy()

    def local_boxes(self) -> np.ndarray:
        """The collision geoms' boxes [n, 6] in their owner's root-body frame (an object's own extents,
        whatever its pose: a box's sides, a bowl's rim radius)."""
        m, d = self.model, self.data
        local = m.geom_aabb[self.geoms]
        root = np.asarray(self.roots)[self.owner]
        body_rot = d.xmat[root].reshape(-1, 3, 3)
        rel = np.einsum("nji,njk->nik", body_rot, d.geom_xmat[self.geoms].reshape(-1, 3, 3))
        centre = np.einsum("nji,nj->ni", body_rot, d.geom_xpos[self.geoms] - d.xpos[root])
        centre += np.einsum("nij,nj->ni", rel, local[:, :3])
        half = np.einsum("nij,nj->ni", np.abs(rel), local[:, 3:])
        return np.concatenate([centre - half, centre + half], axis=1)

    def read(self) -> dict:
        d = self.data
        boxes, centre, rot, half = self.geom_boxes()
        bodies = {}
        local = self.local_boxes()
        for i, (name, root) in enumerate(zip(self.names, self.roots)):
            own, own_local = boxes[self.owner == i], local[self.owner == i]
            bodies[name] = {
                "pos": d.xpos[root].copy(),
                "mat": d.xmat[root].reshape(3, 3).copy(),
                "aabb": np.concatenate([own[:, :3].min(0), own[:, 3:].max(0)]),
                "local_aabb": np.concatenate([own_local[:, :3].min(0), own_local[:, 3:].max(0)]),
            }
        mat = d.site_xmat[self.grip_site].reshape(3, 3).copy()
        self.step += 1
        return {
            "episode": self.episode,
            "step": self.step - 1,
            "eef_pos": d.site_xpos[self.grip_site].copy(),
            "eef_mat": mat,
            "gripper_qpos": d.qpos[self.finger_qpos].copy(),
            "robot_base": d.xpos[self.robot_base].copy(),
            "bodies": bodies,
            "obstacles": {
                "owner": [self.names[i] for i in self.owner],
                "aabb": boxes,
                "centre": centre,
                "rot": rot,
                "half": half,
            },
            "sites": {
                name: {
                    "pos": d.site_xpos[sid].copy(),
                    "mat": d.site_xmat[sid].reshape(3, 3).copy(),
                    "size": size.copy(),
                }
                for name, (sid, size) in self.sites.items()
            },
            "goal": self.goal,
        }
