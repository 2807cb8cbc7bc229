"""A scripted expert for LIBERO (`--policy expert`): it reads privileged simulator state (harness/eval/simstate.py)
and drives the same controller and action space as LIBERO's demonstrations, so that success-rate gates gate
a real rate, on the CPU, without a learned model.

It knows what a human demonstrator knows: which object to move and where to (the task's BDDL goal, as the
environment parsed it), and where everything is. It knows nothing of the success check beyond that.

Actions are LIBERO's 7-d OSC_POSE commands (robosuite's osc_pose.json): a unit action moves the controller's
goal 0.05 m (position) and 0.5 rad (orientation, a rotation vector in the world frame) from the current grip
pose; the gripper integrates the sign of the last value, 0.25 of its range per step. The controller (kp 150,
critically damped) follows at about a quarter of a position offset per 0.05 s step: 0.0125 m per step at a
steady unit action, and turns at 0.02-0.07 rad per step. The expert asks for the goal it wants, capped in
speed, and re-plans after every step (`replan_steps = 1`).

Pick and place (a bowl by its rim, the cream cheese across its narrow side), in phases: approach above the
grasp point with the fingers turned to it and settle there, descend, close, slide out from under anything
that overhangs the object (the cabinet's top above a bowl at the back of its drawer), lift to a carry
height that clears what lies in between, carry above the target, lower until the object is just above what
is under it, release, retreat. A grasp that missed or dropped the object is tried again from where the
object now lies, on another side. A goal of several (on X target) / (in X region) predicates (libero_10's
"put both X and Y in the basket") is one pick and place per predicate, in order; into a container (the
basket, the caddy) the hand stops above its walls and handle and lets the object drop, leaves as high as it
came, and crosses to the next object at that height before coming down.

Boxes, cans and bottles (libero_object's groceries, the cream cheese, the book) are taken from above across
the side whose faces stand upright at the pads' height (a carton's gable top slopes across one side), the
narrower if both do; where the hand would hit a taller neighbour the fingers turn (up to 45 degrees) or
move along the box, and the hand comes down from above the neighbours.

Grasp side: a bowl (or a mug, its handle counted as an obstacle) can be taken at any point of its rim. Each of 24 candidate points is scored by the
clearance of the fingers (pads 3 cm apart, beside the wall) and of the hand (21 cm along the finger line, just
above the rim) from the other objects' and fixtures' collision boxes at their heights (drawer walls, the
cabinet, the other bowl, the ramekin): fingers clear by 3 cm are as good as clearer, the hand counts half;
then a reach short of the arm's limit, a side not tried in vain, the least wrist turn. The hand turns so
that its fingers close across the rim there.
"""

from __future__ import annotations

import collections
import math
import os
import re
from pathlib import Path

import numpy as np

from models.policy import EvalPolicy, PolicyError

from ..errors import UsageError
from .protocol import ACTION_DIM

POS_SCALE = 0.05  # metres of controller goal per unit action (osc_pose.json output_max)
ROT_SCALE = 0.5  # radians of controller goal per unit action
OPEN, CLOSE = -1.0, 1.0  # gripper command levels
GRIP_RATE = 0.25  # robosuite's Panda gripper: its level moves 0.01 per 2 ms substep toward the command's sign
RIM_OPEN = 0.25  # level for a rim grasp: the pads 3 cm apart (7.75 at OPEN), room enough for the wall
DOWN = np.array([0.0, 0.0, -1.0])

# Gripper geometry around the grip site (metres; the finger line is the site's x axis).
FINGER_THICKNESS = 0.012  # a finger beyond its pad, along the finger line
FINGER_WIDTH = 0.013  # half width of a finger across the finger line
FINGER_BELOW = 0.015  # fingertips below the site
HAND_HALF_LENGTH = 0.106  # the hand along the finger line, each side
HAND_HALF_WIDTH = 0.045
HAND_ABOVE = 0.023  # the hand's underside above the site
PAD_TOP = 0.012  # finger pads from 0.005 below the site to 0.012 above it
REACH = 0.70  # horizontal distance from the arm's base beyond which reaching low gets hard (metres)

# The tasks the expert covers (LIBERO task names), each measured (docs/expert.md). Others are refused.
COVERED = {
    "libero_spatial": "all",
    "libero_object": "all",
    "libero_10": {
        "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket",
        "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket",
        "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_white_mug_on_the_right_plate",
        "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_to_the_right_of_the_plate",
        "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy",
        "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket",
    },
    "libero_goal": {
        "put_the_bowl_on_the_stove",
        "put_the_bowl_on_top_of_the_cabinet",
        "put_the_bowl_on_the_plate",
        "put_the_cream_cheese_in_the_bowl",
    },
}
MUGS = {"porcelain_mug", "white_yellow_mug", "red_coffee_mug"}  # by the rim, away from the handle
RIM_GRASP = {"akita_black_bowl"} | MUGS  # bowls and mugs: the fingers straddle the rim
# From above, across the narrower horizontal side: small boxes, cans and bottles (a bottle by its neck).
BOX_GRASP = {
    "cream_cheese",
    "alphabet_soup",
    "bbq_sauce",
    "butter",
    "chocolate_pudding",
    "ketchup",
    "milk",
    "orange_juice",
    "salad_dressing",
    "tomato_sauce",
    "black_book",
}
PLACE_PREDICATES = ("on", "in")  # (on X target) and (in X region): both are "put X there"

SABOTAGE_ENV = "VLABENCH_TEST_EXPERT_SABOTAGE"  # TEST-ONLY: "no-grasp" keeps the gripper open (gates must fail)
SABOTAGES = ("no-grasp",)


def category(name: str) -> str:
    """An object's category from its BDDL name (akita_black_bowl_1 -> akita_black_bowl)."""
    return re.sub(r"_\d+$", "", name)


def pick_and_places(goal: list) -> list[tuple[str, str]]:
    """The (object, target) pairs of a parsed BDDL goal, in its order, one pick and place each; or ValueError
    saying why the expert cannot do it. Every predicate must be (on X target) or (in X region)."""
    text = " and ".join("(" + " ".join(p) + ")" for p in goal)
    if not goal:
        raise ValueError("an empty goal")
    steps = []
    for predicate in goal:
        if len(predicate) != 3 or predicate[0].lower() not in PLACE_PREDICATES:
            raise ValueError(f"goal {text}: the expert moves objects onto or into targets, not ({' '.join(predicate)})")
        _, obj, target = predicate
        if category(obj) not in RIM_GRASP | BOX_GRASP:
            raise ValueError(f"goal {text}: the expert cannot move a {category(obj)}")
        steps.append((obj, target))
    return steps


def pick_and_place(goal: list) -> tuple[str, str]:
    """(object, target) of a parsed BDDL goal of one pick and place, or ValueError saying why not."""
    steps = pick_and_places(goal)
    if len(steps) != 1:
        text = " and ".join("(" + " ".join(p) + ")" for p in goal)
        raise ValueError(f"goal {text}: more than one object to move")
    return steps[0]


def bddl_goal(path) -> list[list[str]]:
    """The goal of a BDDL file as predicate lists, lower case: [["on", "akita_black_bowl_1", "plate_1"]]."""
    text = Path(path).read_text().lower()
    start = text.find("(:goal")
    if start < 0:
        raise ValueError(f"{path}: no (:goal ...) section")
    tokens = re.findall(r"\(|\)|[^\s()]+", text[start:])

    def parse(i):  # tokens[i] is "(": the list it opens, and the index after its ")"
        out, i = [], i + 1
        while tokens[i] != ")":
            if tokens[i] == "(":
                item, i = parse(i)
            else:
                item, i = tokens[i], i + 1
            out.append(item)
        return out, i + 1

    (_, body), _ = parse(0)
    return body[1:] if body[0] == "and" else [body]


# ----------------------------------------------------------------------------- geometry


def rotation_vector(mat: np.ndarray) -> np.ndarray:
    """The rotation vector (axis * angle) of a rotation matrix."""
    cos = np.clip((np.trace(mat) - 1.0) / 2.0, -1.0, 1.0)
    angle = math.acos(cos)
    axis = np.array([mat[2, 1] - mat[1, 2], mat[0, 2] - mat[2, 0], mat[1, 0] - mat[0, 1]])
    if angle < 1e-6:
        return axis / 2.0  # small angles: the skew part is the vector
    if math.pi - angle < 1e-3:  # half a turn: the axis is the dominant column of mat + I
        sym = (mat + np.eye(3)) / 2.0
        axis = sym[:, np.argmax(np.diag(sym))]
        return axis / np.linalg.norm(axis) * angle
    return axis / (2.0 * math.sin(angle)) * angle


def grip_mat(finger_line: np.ndarray) -> np.ndarray:
    """The grip site's rotation pointing straight down with the fingers closing along `finger_line`."""
    x = np.array([finger_line[0], finger_line[1], 0.0])
    x /= np.linalg.norm(x)
    return np.column_stack([x, np.cross(DOWN, x), DOWN])


class Boxes:
    """Collision boxes (rows of sim_state["obstacles"]): for clearance, their oriented boxes cut at their
    centre's height; for heights, their world bounding boxes."""

    def __init__(self, obstacles: dict, keep=None):
        keep = np.ones(len(obstacles["owner"]), dtype=bool) if keep is None else keep
        self.owner = np.asarray(obstacles["owner"])[keep]
        self.aabb, self.centre = np.asarray(obstacles["aabb"])[keep], np.asarray(obstacles["centre"])[keep]
        self.rot, self.half = np.asarray(obstacles["rot"])[keep], np.asarray(obstacles["half"])[keep]

    def _subset(self, keep) -> Boxes:
        return Boxes(
            {"owner": self.owner, "aabb": self.aabb, "centre": self.centre, "rot": self.rot, "half": self.half}, keep
        )

    def without(self, *names: str) -> Boxes:
        return self._subset(~np.isin(self.owner, names))

    def above(self, z: float) -> Boxes:
        """The boxes whose bottom is above height `z` (what overhangs whatever is below it)."""
        return self._subset(self.aabb[:, 2] > z)

    def between(self, z_low: float, z_high: float) -> Boxes:
        return self._subset((self.aabb[:, 5] > z_low) & (self.aabb[:, 2] < z_high))

    def distances(self, points) -> np.ndarray:
        """Each box's smallest horizontal distance to any of `points` [n, >=2] (0 inside)."""
        if not len(self.owner):
            return np.zeros(0)
        offset = np.asarray(points, dtype=float)[None, :, :2] - self.centre[:, None, :2]  # [boxes, points, 2]
        local = np.einsum("bik,bpi->bpk", self.rot[:, :2, :], offset)  # in each box's frame
        outside = np.maximum(np.abs(local) - self.half[:, None, :], 0.0)
        return np.linalg.norm(outside, axis=2).min(axis=1)

    def distance(self, points) -> float:
        d = self.distances(points)
        return float(d.min()) if len(d) else math.inf

    def top_near(self, points, radius: float, default: float = 0.9) -> float:
        """The highest top among the boxes within `radius` of any of `points` (`default`, the table's or the
        floor's height, if none)."""
        near = self.distances(points) <= radius
        return float(self.aabb[near, 5].max()) if near.any() else default


def rectangle(centre, along, half_length, half_width, n=9) -> np.ndarray:
    """Points covering a horizontal rectangle [n*3, 2] centred at `centre`, long side along `along`."""
    along = np.asarray(along[:2], dtype=float)
    across = np.array([-along[1], along[0]])
    s = np.linspace(-half_length, half_length, n)
    t = np.array([-half_width, 0.0, half_width])
    return (
        np.asarray(centre[:2])[None, None, :]
        + s[:, None, None] * along[None, None, :]
        + t[None, :, None] * across[None, None, :]
    ).reshape(-1, 2)


def segment(start, end, n=12) -> np.ndarray:
    return np.asarray(start[:2])[None] + np.linspace(0, 1, n)[:, None] * (np.asarray(end[:2]) - start[:2])[None]


def finger_gap(level: float) -> float:
    """The gap between the finger pads at a gripper level (-1: 7.75 cm, 0: half that, 1: closed)."""
    return 0.0775 * (1.0 - level) / 2.0


def gripper_clearance(boxes: Boxes, point, finger_line, grip_z: float, level: float) -> tuple[float, float]:
    """How far the fingers (open to `level`) and the hand, at a grasp at `point` (grip site height
    `grip_z`), stay from `boxes` (everything but the grasped object): (fingers, hand)."""
    fingers = boxes.between(grip_z - FINGER_BELOW, grip_z + 0.05)
    hand = boxes.between(grip_z + HAND_ABOVE, grip_z + 0.2)
    reach = finger_gap(level) / 2 + FINGER_THICKNESS
    return (
        fingers.distance(rectangle(point, finger_line, reach, FINGER_WIDTH)),
        hand.distance(rectangle(point, finger_line, HAND_HALF_LENGTH, HAND_HALF_WIDTH)),
    )


def surface(state: dict) -> float:
    """The height of what the scene stands on: the lowest bottom of its objects and fixtures (the table's
    0.9 m in a kitchen, the floor's 0 in libero_object's floor scene)."""
    return float(min(body["aabb"][2] for body in state["bodies"].values()))


def base_point(body: dict) -> np.ndarray:
    """The centre of an object's bottom face in the world: what must land on the target. A bowl held by
    its rim hangs tilted, and the centre of its tilted bounding box is not above its base."""
    local, mat = body["local_aabb"], body["mat"]
    up = int(np.argmax(np.abs(mat[2])))  # the object's own axis nearest to vertical
    point = (local[:3] + local[3:]) / 2
    point[up] = local[up] if mat[2, up] > 0 else local[3 + up]
    return body["pos"] + mat @ point


# ----------------------------------------------------------------------------- grasps


def mug_rim(obstacles: dict, obj: str) -> tuple[np.ndarray, float, np.ndarray]:
    """(centre, outer radius, handle rows of `obstacles`) of a mug's rim: its collision boxes that reach its
    top are the wall; those outside the wall's circle are the handle."""
    own = np.asarray(obstacles["owner"]) == obj
    aabb = np.asarray(obstacles["aabb"])
    top = aabb[own, 5].max()
    wall = own & (aabb[:, 5] > top - 0.008)
    lo, hi = aabb[wall, :3].min(0), aabb[wall, 3:].max(0)
    centre = (lo + hi) / 2
    rim = float(min(hi[0] - lo[0], hi[1] - lo[1])) / 2
    middle = (aabb[:, :2] + aabb[:, 3:5]) / 2
    handle = own & ~wall & (np.linalg.norm(middle - centre[:2], axis=1) > rim - 0.005)
    return centre, rim, handle


def rim_grasp(state: dict, obj: str, place, failed: list) -> tuple[np.ndarray, np.ndarray, float]:
    """(grip site position, finger line, clearance) of the best grasp of a bowl's rim, for a bowl that goes
    to `place`, away from the grasp points in `failed`."""
    body = state["bodies"][obj]
    box = body["aabb"]
    centre = (box[:3] + box[3:]) / 2
    local = body["local_aabb"]
    rim = min(local[3] - local[0], local[4] - local[1]) / 2  # the rim's outer radius
    grip_z = box[5] - PAD_TOP  # pads level with the rim's top: the palm stays above it
    boxes = Boxes(state["obstacles"]).without(obj)
    if category(obj) in MUGS:  # the rim without the handle, which the fingers must keep clear of
        centre, rim, handle = mug_rim(state["obstacles"], obj)
        boxes = Boxes(state["obstacles"], keep=(np.asarray(state["obstacles"]["owner"]) != obj) | handle)
    inset = rim - 0.003  # the middle of the wall's top
    current = state["eef_mat"][:, 0]
    base = state["robot_base"]
    best = None
    for angle in np.linspace(0, 2 * math.pi, 24, endpoint=False):
        radial = np.array([math.cos(angle), math.sin(angle), 0.0])
        point = centre + inset * radial
        fingers, hand = gripper_clearance(boxes, point, radial, grip_z, RIM_OPEN)
        turn = math.acos(min(1.0, abs(float(radial[:2] @ current[:2]) / np.linalg.norm(current[:2]))))
        # How far the arm must reach, to the grasp and to the place (the hand stays on the same side of the
        # bowl): near its limit the arm stalls short of the target.
        reach = max(np.linalg.norm(point[:2] - base[:2]), np.linalg.norm(place[:2] + point[:2] - centre[:2] - base[:2]))
        retried = any(np.linalg.norm(point[:2] - f[:2]) < 0.03 for f in failed)
        # Fingers clear enough (3 cm) are as good as clearer; the hand, above the rim, matters less; then a
        # reach short of the arm's limit, a side not tried in vain, the least turn.
        score = (
            min(fingers, 0.03) + 0.5 * min(hand, 0.02) - 0.5 * max(0.0, reach - REACH) - 0.02 * retried - 0.002 * turn
        )
        if best is None or score > best[0]:
            best = (score, np.array([point[0], point[1], grip_z]), radial, min(fingers, hand))
    return best[1], best[2], best[3]


def upright_faces(obstacles: dict, obj: str, line, grip_z: float) -> float:
    """The share of `obj`'s collision boxes at the pads' height (grip site at `grip_z`) whose faces toward
    fingers closing along `line` stand upright (a pad squeezes them; a sloping face slips out): 1.0 for a box,
    0.0 across the sloping sides of a carton's gable top."""
    own = np.asarray(obstacles["owner"]) == obj
    aabb = np.asarray(obstacles["aabb"])[own]
    rot = np.asarray(obstacles["rot"])[own]
    band = (aabb[:, 5] > grip_z - 0.005) & (aabb[:, 2] < grip_z + PAD_TOP)
    if not band.any():
        return 0.0
    line = np.asarray(line, dtype=float) / np.linalg.norm(line)
    good = 0
    for r in rot[band]:
        k = int(np.argmax(np.abs(r.T @ line)))  # the box's face most turned toward a finger
        good += abs(r[2, k]) < 0.2 and abs(r[:, k] @ line) > 0.9
    return good / int(band.sum())


def box_grasp(state: dict, obj: str) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(grip site position, finger line, clearance, gripper level) of a grasp across a box's narrower
    horizontal side, the fingers opened 2 cm wider than it. Where the hand (21 cm along the finger line)
    would hit a taller neighbour, the fingers turn (up to 45 degrees, the chord across the box still within
    their reach) or move along the box's long side, whichever keeps the hand clearest."""
    body = state["bodies"][obj]
    box, local, mat = body["aabb"], body["local_aabb"], body["mat"]
    centre = body["pos"] + mat @ ((local[:3] + local[3:]) / 2)
    sizes = local[3:] - local[:3]
    horizontal = [i for i in range(3) if abs(mat[2, i]) < 0.7]  # the box's own axes that lie flat
    grip_z = box[5] - min(PAD_TOP, (box[5] - box[2]) / 2)
    # Across the side the pads can squeeze (a carton's gable top slopes across one side and stands upright
    # across the other), then across the narrower side.
    axis = max(horizontal, key=lambda i: (upright_faces(state["obstacles"], obj, mat[:, i], grip_z), -sizes[i]))
    across = np.array([mat[0, axis], mat[1, axis], 0.0])
    across /= np.linalg.norm(across)
    along = np.array([-across[1], across[0], 0.0])
    others = [i for i in horizontal if i != axis]
    half_along = sizes[others[0]] / 2 if others else 0.0
    boxes = Boxes(state["obstacles"]).without(obj)
    best = None
    for angle in (0.0, 0.26, -0.26, 0.52, -0.52, 0.79, -0.79):
        chord = sizes[axis] / math.cos(angle)
        if angle and chord + 0.02 > 0.0775:
            continue
        line = math.cos(angle) * across + math.sin(angle) * along
        level = math.floor((1.0 - 2.0 * (chord + 0.02) / 0.0775) / GRIP_RATE) * GRIP_RATE
        level = float(np.clip(level, OPEN, 0.5))
        for shift in (0.0, 0.01, -0.01, 0.02, -0.02, 0.03, -0.03):
            if abs(shift) > max(0.0, half_along - 0.015):
                continue
            point = np.array([centre[0], centre[1], grip_z]) + shift * along
            fingers, hand = gripper_clearance(boxes, point, line, grip_z, level)
            score = min(fingers, 0.03) + 0.5 * min(hand, 0.02) - 0.01 * abs(angle) - 0.1 * abs(shift)
            if best is None or score > best[0] + 1e-9:
                best = (score, point, line, min(fingers, hand), level)
    return best[1], best[2], best[3], best[4]


# ----------------------------------------------------------------------------- one episode


class Episode:
    """The plan and progress of one episode: a phase, a target for the grip site, a gripper opening."""

    def __init__(self, goal: list, sabotage: str | None = None):
        self.steps = pick_and_places(goal)  # one pick and place per goal predicate, in order
        self.into = [p[0].lower() == "in" for p in goal]  # into a container (the basket, the caddy)
        self.sabotage = sabotage
        self.trace: collections.deque = collections.deque(maxlen=4)  # recent grip positions: stalls
        self.grip = OPEN  # the gripper's command level, as robosuite integrates it (the wait steps open it)
        self.finger_line = None
        self.travel_z = -math.inf  # the height the next approach crosses at: set on leaving an object
        self.index = -1
        self.next_step()

    def next_step(self) -> bool:
        """Start the next pick and place of the goal; False when none is left."""
        if self.index + 1 >= len(self.steps):
            return False
        self.index += 1
        self.obj, self.target = self.steps[self.index]
        self.phase, self.phase_steps, self.retries = "plan", 0, 0
        self.failed = []  # grasp points tried in vain
        return True

    # --- helpers

    def goto(self, phase: str):
        self.phase, self.phase_steps = phase, 0
        self.trace.clear()

    def speed(self) -> float:
        """How far the grip site moved in the last step (metres)."""
        return float(np.linalg.norm(self.trace[-1] - self.trace[-2])) if len(self.trace) > 1 else 0.0

    def stalled(self, eps: float = 0.0008) -> bool:
        """The grip site has moved less than `eps` per step over the last steps."""
        if len(self.trace) < self.trace.maxlen:
            return False
        return bool(np.linalg.norm(self.trace[-1] - self.trace[0]) < eps * (self.trace.maxlen - 1))

    def move(self, state: dict, pos, grip: float, speed: float = 1.0) -> np.ndarray:
        """The action that sets the controller's goal at `pos` (at most `speed` units away), turns the hand
        to point down with the fingers along self.finger_line, and moves the gripper toward level `grip`."""
        action = np.zeros(ACTION_DIM)
        delta = (np.asarray(pos, dtype=float) - state["eef_pos"]) / POS_SCALE
        norm = np.linalg.norm(delta)
        action[:3] = delta * (speed / norm) if norm > speed else delta
        line = state["eef_mat"][:, 0] if self.finger_line is None else self.finger_line
        line = line if line @ state["eef_mat"][:, 0] >= 0 else -line  # the hand is symmetric: turn the short way
        action[3:6] = np.clip(rotation_vector(grip_mat(line) @ state["eef_mat"].T) / ROT_SCALE, -1.0, 1.0)
        if self.sabotage == "no-grasp":
            grip = OPEN
        # robosuite's Panda gripper integrates the command's sign, GRIP_RATE per step; 0 holds it.
        command = float(np.sign(round((grip - self.grip) / GRIP_RATE)))
        self.grip = float(np.clip(self.grip + GRIP_RATE * command, OPEN, CLOSE))
        action[6] = command
        return action

    def ramp(self, start: float) -> float:
        """A speed limit that grows from `start` to 1 over the phase's first steps: a bowl held by its rim
        swings, and slips, when jerked."""
        return min(1.0, start + 0.1 * self.phase_steps)

    def turned(self, state, tolerance: float = 0.08) -> bool:
        return any(
            np.linalg.norm(rotation_vector(grip_mat(line) @ state["eef_mat"].T)) < tolerance
            for line in (self.finger_line, -self.finger_line)
        )

    def holding(self, state) -> bool:
        """The grip site is still within the object's bounds (a held bowl may tilt about the fingers, but
        the part between them stays there) and the fingers are not shut on nothing."""
        box = state["bodies"][self.obj]["aabb"]
        inside = np.all(state["eef_pos"] > box[:3] - 0.01) and np.all(state["eef_pos"] < box[3:] + 0.01)
        return bool(inside) and self.opening(state) > 0.003

    @staticmethod
    def opening(state) -> float:
        q = state["gripper_qpos"]
        return float(q[0] - q[1])

    def target_point(self, state) -> np.ndarray:
        """Where the object goes: the target object's centre, or the target region's site."""
        if self.target in state["bodies"]:
            box = state["bodies"][self.target]["aabb"]
            return (box[:3] + box[3:]) / 2
        return np.asarray(state["sites"][self.target]["pos"], dtype=float)

    def act(self, state: dict) -> np.ndarray:
        self.trace.append(np.asarray(state["eef_pos"], dtype=float))
        self.phase_steps += 1
        return self._pick_place(state)

    # --- pick and place

    def _plan_grasp(self, state):
        if category(self.obj) in RIM_GRASP:
            self.grasp, self.finger_line, self.clearance = rim_grasp(
                state, self.obj, self.target_point(state), self.failed
            )
            self.ready = RIM_OPEN
        else:
            self.grasp, self.finger_line, self.clearance, self.ready = box_grasp(state, self.obj)
        obj_top = state["bodies"][self.obj]["aabb"][5]
        self.hover_z = max(self.grasp[2] + 0.07, obj_top + 0.03 + FINGER_BELOW)
        if category(self.obj) in BOX_GRASP:  # come down from above the taller neighbours the hand would sweep
            near = Boxes(state["obstacles"]).without(self.obj)
            hand = rectangle(self.grasp, self.finger_line, HAND_HALF_LENGTH + 0.03, HAND_HALF_WIDTH + 0.03)
            self.hover_z = max(self.hover_z, near.top_near(hand, 0.0, -math.inf) - HAND_ABOVE + 0.02)

    def _plan_carry(self, state):
        body = state["bodies"][self.obj]
        boxes = Boxes(state["obstacles"]).without(self.obj)
        self.place = self.target_point(state)
        radius = float(np.max(body["aabb"][3:5] - body["aabb"][0:2])) / 2
        self.hold_drop = state["eef_pos"][2] - body["aabb"][2]  # the object's bottom below the grip site
        floor = surface(state)
        self.place_top = boxes.top_near([self.place], 0.3 * radius, floor)  # what the object will stand on
        route = boxes.top_near(segment(base_point(body), self.place), radius + 0.02, floor)
        # Into a container: the hand stays above its walls and handle (a basket's handle arches over it, and
        # a hand lowered beside it hooks it on the way out): the object drops the rest of the way.
        self.hand_floor = -math.inf
        if self.into[self.index]:
            hand = rectangle(self.place, state["eef_mat"][:, 0], HAND_HALF_LENGTH + 0.02, HAND_HALF_WIDTH + 0.02)
            walls = boxes._subset(boxes.aabb[:, 5] > self.place_top + 0.01)
            self.hand_floor = walls.top_near(hand, 0.0, -math.inf) - HAND_ABOVE + 0.015
        self.carry_z = max(min(1.35, max(route, self.place_top) + 0.04 + self.hold_drop), state["eef_pos"][2] + 0.06)

    def _out_from_under(self, state) -> np.ndarray:
        """The horizontal move that takes the held object out from under whatever overhangs it (the cabinet's
        top above a bowl at the back of its drawer); zero when nothing does."""
        box = state["bodies"][self.obj]["aabb"]
        centre = (box[:3] + box[3:]) / 2
        radius = float(np.max(box[3:5] - box[0:2])) / 2
        above = Boxes(state["obstacles"]).without(self.obj).above(box[5] - 0.01)
        clear = radius + 0.015
        if above.distance([centre]) >= clear:
            return np.zeros(3)
        best = None
        for angle in np.linspace(0, 2 * math.pi, 16, endpoint=False):
            away = np.array([math.cos(angle), math.sin(angle), 0.0])
            # The least move that clears it, along this direction (up to 4 cm).
            for step in np.linspace(0.005, 0.04, 8):
                if above.distance([centre + step * away]) >= clear:
                    break
            if best is None or step < best[0]:
                best = (step, step * away)
        return best[1]

    def _retry(self, state) -> np.ndarray:
        """The grasp missed or the object fell: open, back off upward, and plan again from where it lies."""
        self.retries += 1
        self.failed.append(self.grasp)
        self.retreat = np.array(state["eef_pos"]) + [0.0, 0.0, 0.08]
        self.travel_z = self.retreat[2]  # given up after the fourth miss: the next object's approach crosses here
        self.goto("plan" if self.retries <= 3 else "retreat")
        return self.move(state, np.array(state["eef_pos"]) + [0.0, 0.0, 0.02], OPEN)

    def _pick_place(self, state) -> np.ndarray:
        """The action of the current phase; a phase that is done moves on to the next within the same step. The
        phases run grasp (plan, rise, approach, descend, close), then carry (slide, lift, carry, lower, release,
        retreat)."""
        action = self._grasp_phases(state)
        return action if action is not None else self._carry_phases(state)

    def _grasp_phases(self, state) -> np.ndarray | None:
        """Plan a grasp, rise above it, approach, descend and close the fingers; None once the object is
        gripped (the phase is then slide, or a later one)."""
        pos = state["eef_pos"]
        if self.phase == "plan":
            self._plan_grasp(state)
            self.goto("rise" if pos[2] < self.hover_z - 0.02 else "approach")
        if self.phase == "rise":  # straight up first when low (after a failed grasp)
            if pos[2] < self.hover_z - 0.02 and self.phase_steps <= 40:
                return self.move(state, [pos[0], pos[1], self.hover_z + 0.01], self.ready)
            self.goto("approach")
        if self.phase == "approach":
            above = np.array([self.grasp[0], self.grasp[1], self.hover_z])
            if self.index > 0 and np.linalg.norm(above[:2] - pos[:2]) > 0.03:  # after a placement: across, then down
                return self.move(state, [above[0], above[1], max(self.hover_z, self.travel_z)], self.ready)
            # Settled above the grasp: the hand still moving sideways would carry a finger onto the rim. Near
            # the arm's reach it may stop short, a centimetre or two off: as close as it gets.
            error = np.linalg.norm(above - pos)
            settled = self.turned(state) and (
                (error < 0.006 and self.speed() < 0.002) or (error < 0.02 and self.stalled(0.0005))
            )
            if not (settled or self.phase_steps > 80):
                return self.move(state, above, self.ready)
            self.goto("descend")
        if self.phase == "descend":
            error = np.linalg.norm(self.grasp - pos)
            if not (error < 0.004 or (self.stalled() and pos[2] < self.grasp[2] + 0.02) or self.phase_steps > 50):
                return self.move(state, self.grasp, self.ready, speed=0.8 if error > 0.04 else 0.3)
            self.goto("close")
        if self.phase == "close":
            opening = self.opening(state)
            settled = self.phase_steps > 6 and abs(opening - self.last_opening) < 3e-4
            self.last_opening = opening
            if not (settled or self.phase_steps > 16):
                return self.move(state, self.grasp, CLOSE)
            if opening < 0.004:  # closed on nothing
                return self._retry(state)
            self.slide_to = np.array(pos) + self._out_from_under(state)
            self.goto("slide")
        return None

    def _carry_phases(self, state) -> np.ndarray:
        """With the object held: slide it out from under an overhang, lift, carry above the goal, lower, release
        and retreat; a grasp that lost the object retries."""
        pos = state["eef_pos"]
        body = state["bodies"][self.obj]
        if self.phase in ("slide", "lift", "carry", "lower") and not self.holding(state):
            return self._retry(state)  # it stayed behind or fell
        if self.phase == "slide":  # out from under an overhang (the cabinet's top above a drawer) first
            if np.linalg.norm(self.slide_to[:2] - pos[:2]) > 0.004 and self.phase_steps <= 20:
                return self.move(state, self.slide_to, CLOSE, speed=0.3)
            self.lift_from = np.array(pos)
            self._plan_carry(state)
            self.goto("lift")
        if self.phase == "lift":
            if pos[2] < self.carry_z - 0.01 and self.phase_steps <= 60:
                return self.move(
                    state, [self.lift_from[0], self.lift_from[1], self.carry_z], CLOSE, speed=self.ramp(0.4)
                )
            self.goto("carry")
        if self.phase == "carry":
            goal_xy = pos[:2] + (self.place[:2] - base_point(body)[:2])
            error = np.linalg.norm(goal_xy - pos[:2])
            # Near the goal and no longer moving (the arm at its reach) is as close as it gets.
            if not (error < 0.006 or (error < 0.03 and self.stalled(0.0005)) or self.phase_steps > 100):
                return self.move(
                    state,
                    [goal_xy[0], goal_xy[1], self.carry_z],
                    CLOSE,
                    speed=min(self.ramp(0.3), 1.0 if error > 0.05 else 0.5),
                )
            self.goto("lower")
        if self.phase == "lower":
            base = base_point(body)
            goal = pos + np.array(
                [self.place[0] - base[0], self.place[1] - base[1], self.place_top + 0.012 - body["aabb"][2]]
            )
            goal[2] = max(goal[2], self.hand_floor)
            if not (
                abs(goal[2] - pos[2]) < 0.004 or (self.stalled() and self.phase_steps > 4) or self.phase_steps > 60
            ):
                return self.move(state, goal, CLOSE, speed=1.0 if goal[2] - pos[2] < -0.05 else 0.4)
            self.goto("release")
        if self.phase == "release":
            if self.phase_steps <= 8:
                return self.move(state, pos, OPEN)
            self.retreat = np.array(pos) + [0.0, 0.0, 0.08]
            if self.into[self.index]:  # out of a container as high as the object came in (its handle)
                self.retreat[2] = max(self.retreat[2], self.carry_z)
            self.travel_z = self.retreat[2]  # the next object's approach goes across at this height first
            self.goto("retreat")
        if self.phase == "retreat":
            # Up and away; once there (or after 20 steps), the goal's next pick and place, if any.
            done = pos[2] > self.retreat[2] - 0.01 or self.phase_steps > 20
            if not (done and self.next_step()):
                return self.move(state, self.retreat, OPEN, speed=0.5)
            return self._pick_place(state)
        raise AssertionError(f"unknown phase {self.phase}")


# ----------------------------------------------------------------------------- the policy


class ExpertPolicy(EvalPolicy):
    """The scripted expert as a policy: privileged observations, no images, one action per observation."""

    name = "expert"
    needs_images = False
    privileged = True
    replan_steps = 1  # closed loop: a new action from every step's state
    batches = False  # a call costs microseconds: waiting for other workers to batch with only idles them

    def __init__(self, sabotage: str | None = None):
        if sabotage is not None and sabotage not in SABOTAGES:
            raise PolicyError(f"{SABOTAGE_ENV}: expected one of {', '.join(SABOTAGES)}, got {sabotage!r}")
        self.sabotage = sabotage
        self.episodes: collections.OrderedDict[str, Episode] = collections.OrderedDict()

    def describe(self) -> dict:
        out = {
            "name": self.name,
            "replan_steps": self.replan_steps,
            "covered": {s: sorted(t) if t != "all" else t for s, t in COVERED.items()},
        }
        if self.sabotage:
            out["test_sabotage"] = self.sabotage
        return out

    def covers(self, task: dict) -> bool:
        covered = COVERED.get(task["suite"], ())
        return covered == "all" or task["name"] in covered

    def check_tasks(self, tasks: list[dict]) -> None:
        """Refuse, in one line (UsageError: exit status 2), the tasks the expert does not cover."""
        refused = []
        for task in {t["bddl_file"]: t for t in tasks}.values():
            if not self.covers(task):
                refused.append(f"{task['suite']} task {task['index']} ({task['language']})")
                continue
            pick_and_places(bddl_goal(task["bddl_file"]))  # a covered task the expert cannot read is a bug
        if refused:
            covered = "; ".join(
                f"{s}: {'all tasks' if t == 'all' else ', '.join(sorted(t))}" for s, t in COVERED.items()
            )
            # The user's choice of tasks, not a bug: one line and exit status 2, like any refused input.
            raise UsageError(f"--policy expert does not cover {', '.join(refused)} (it covers {covered})")

    def infer(self, observations: list[dict]) -> list[np.ndarray]:
        chunks = []
        for obs in observations:
            state = obs.get("sim_state")
            if state is None:
                raise PolicyError(
                    "the expert needs privileged observations (sim_state); the runner sends them "
                    "to a policy with privileged = True"
                )
            episode = self.episodes.get(state["episode"])
            if episode is None or state["step"] == 0:
                episode = self.episodes[state["episode"]] = Episode(state["goal"], self.sabotage)
                while len(self.episodes) > 64:  # finished episodes are never announced: keep the recent ones
                    self.episodes.popitem(last=False)
            chunks.append(episode.act(state)[None].astype(np.float32))
        return chunks


def make_expert() -> ExpertPolicy:
    return ExpertPolicy(sabotage=os.environ.get(SABOTAGE_ENV) or None)
