"""The scripted LIBERO expert without a simulator: what policies declare to the workers, the BDDL goal it
reads, its geometry and its gripper bookkeeping (tests/test_eval_expert_sim.py runs it in MuJoCo)."""

import math

import numpy as np
import pytest

from harness.eval.expert import (
    CLOSE,
    OPEN,
    SABOTAGE_ENV,
    Boxes,
    Episode,
    ExpertPolicy,
    bddl_goal,
    grip_mat,
    pick_and_place,
    rotation_vector,
)
from harness.eval.policies import NoopPolicy, PolicyError
from harness.eval.protocol import PolicyNeeds
from models.policy import REPLAN_STEPS

GOAL = [["on", "akita_black_bowl_1", "plate_1"]]


def test_policies_declare_what_the_workers_must_provide():
    assert PolicyNeeds.of(NoopPolicy()) == PolicyNeeds(images=True, privileged=False, replan_steps=REPLAN_STEPS)
    assert PolicyNeeds.of(ExpertPolicy()) == PolicyNeeds(images=False, privileged=True, replan_steps=1)


def test_bddl_goal_and_what_the_expert_can_do(tmp_path):
    path = tmp_path / "task.bddl"
    path.write_text(
        "(define (problem X)\n  (:init (On a_1 b_1))\n  (:goal\n    (And (On cream_cheese_1 "
        "akita_black_bowl_1))\n  )\n)\n"
    )
    assert bddl_goal(path) == [["on", "cream_cheese_1", "akita_black_bowl_1"]]
    assert pick_and_place(bddl_goal(path)) == ("cream_cheese_1", "akita_black_bowl_1")
    with pytest.raises(ValueError, match=r"goal \(open wooden_cabinet_1_middle_region\): the expert moves one"):
        pick_and_place([["open", "wooden_cabinet_1_middle_region"]])
    with pytest.raises(ValueError, match="cannot move a wine_bottle"):
        pick_and_place([["on", "wine_bottle_1", "wooden_cabinet_1_top_side"]])


def test_grip_orientation_and_rotation_vectors():
    mat = grip_mat(np.array([1.0, 1.0, 0.3]))
    assert np.allclose(mat.T @ mat, np.eye(3)) and np.isclose(np.linalg.det(mat), 1.0)
    assert np.allclose(mat[:, 0], [math.sqrt(0.5), math.sqrt(0.5), 0]) and np.allclose(mat[:, 2], [0, 0, -1])
    turn = grip_mat(np.array([0.0, 1.0, 0.0])) @ grip_mat(np.array([1.0, 0.0, 0.0])).T  # a quarter turn about z
    assert np.allclose(rotation_vector(turn), [0, 0, math.pi / 2])
    assert np.allclose(rotation_vector(np.eye(3)), 0)
    half = np.diag([1.0, -1.0, -1.0])  # half a turn about x
    assert np.allclose(np.abs(rotation_vector(half)), [math.pi, 0, 0])


def test_clearance_uses_oriented_boxes():
    """A thin wall turned 45 degrees: its axis-aligned box would cover the point, the wall itself does not."""
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    half = np.array([0.1, 0.005, 0.05])
    reach = np.abs(rot) @ half
    boxes = Boxes(
        {
            "owner": ["wall"],
            "aabb": np.array([np.concatenate([-reach, reach])]),
            "centre": np.zeros((1, 3)),
            "rot": rot[None],
            "half": half[None],
        }
    )
    point = np.array([[0.05, -0.05]])  # 0.0707 from the wall's centre line, across it
    assert math.isclose(boxes.distance(point), math.hypot(0.05, 0.05) - 0.005, rel_tol=1e-9)
    assert boxes.distance([[0.05, 0.05]]) == 0.0  # on the wall
    assert boxes.without("wall").distance(point) == math.inf
    assert boxes.top_near(point, 0.1) == pytest.approx(0.05) and boxes.top_near(point, 0.01) == 0.9


def _state(eef=(0.0, 0.0, 1.0)):
    return {
        "eef_pos": np.array(eef),
        "eef_mat": grip_mat(np.array([0.0, 1.0, 0.0])),
        "gripper_qpos": np.array([0.04, -0.04]),
    }


def test_gripper_commands_follow_robosuites_integrator():
    """The Panda gripper integrates the sign of its command, 0.25 per step: 4 steps from open to half
    open, then 0 holds it there."""
    episode = Episode(GOAL)
    episode.finger_line = np.array([0.0, 1.0, 0.0])
    commands = [episode.move(_state(), [0.0, 0.0, 1.0], 0.0)[6] for _ in range(6)]
    assert commands == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0] and episode.grip == 0.0
    action = episode.move(_state(), [0.1, 0.0, 1.0], CLOSE)  # 10 cm away: the goal capped at one unit
    assert np.allclose(action[:3], [1.0, 0.0, 0.0]) and np.allclose(action[3:6], 0) and action[6] == 1.0
    sabotaged = Episode(GOAL, sabotage="no-grasp")
    sabotaged.finger_line = np.array([0.0, 1.0, 0.0])
    assert [sabotaged.move(_state(), [0, 0, 1], CLOSE)[6] for _ in range(3)] == [0.0, 0.0, 0.0]
    assert sabotaged.grip == OPEN


def test_sabotage_is_explicit():
    assert ExpertPolicy(sabotage="no-grasp").describe()["test_sabotage"] == "no-grasp"
    assert "test_sabotage" not in ExpertPolicy().describe()
    with pytest.raises(PolicyError, match=f"{SABOTAGE_ENV}: expected one of no-grasp"):
        ExpertPolicy(sabotage="drop")
