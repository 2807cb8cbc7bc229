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
    box_grasp,
    grip_mat,
    mug_rim,
    pick_and_place,
    pick_and_places,
    rectangle,
    rim_grasp,
    rotation_vector,
    surface,
    upright_faces,
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
    with pytest.raises(
        ValueError, match=r"goal \(open wooden_cabinet_1_middle_region\): the expert moves objects onto or into"
    ):
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


def test_goals_of_several_pick_and_places_in_order():
    """libero_10's two-object goals are one pick and place per predicate; (in X region) counts as one."""
    goal = [["in", "alphabet_soup_1", "basket_1_contain_region"], ["in", "cream_cheese_1", "basket_1_contain_region"]]
    assert pick_and_places(goal) == [
        ("alphabet_soup_1", "basket_1_contain_region"),
        ("cream_cheese_1", "basket_1_contain_region"),
    ]
    with pytest.raises(ValueError, match="more than one object"):
        pick_and_place(goal)
    with pytest.raises(ValueError, match=r"not \(turnon flat_stove_1\)"):
        pick_and_places([["turnon", "flat_stove_1"], ["on", "moka_pot_1", "flat_stove_1_cook_region"]])
    with pytest.raises(ValueError, match="cannot move a moka_pot"):
        pick_and_places([["on", "moka_pot_1", "flat_stove_1_cook_region"]])
    episode = Episode(goal)
    assert (episode.obj, episode.index, episode.into) == ("alphabet_soup_1", 0, [True, True])
    assert episode.next_step() and episode.obj == "cream_cheese_1" and episode.phase == "plan"
    assert not episode.next_step() and episode.obj == "cream_cheese_1"


def _box(owner, centre, half, rot=None):
    rot = np.eye(3) if rot is None else rot
    centre, half = np.asarray(centre, float), np.asarray(half, float)
    reach = np.abs(rot) @ half
    return owner, np.concatenate([centre - reach, centre + reach]), centre, rot, half


def _scene(*boxes, bodies=None):
    owner, aabb, centre, rot, half = zip(*boxes)
    obstacles = {"owner": list(owner), "aabb": np.array(aabb), "centre": np.array(centre)}
    obstacles.update(rot=np.array(rot), half=np.array(half))
    return {"obstacles": obstacles, "bodies": bodies or {}, "eef_mat": grip_mat(np.array([0.0, 1.0, 0.0]))}


def test_a_cartons_gable_top_is_squeezed_across_its_upright_faces():
    """A milk carton (5.3 cm square, a gable roof sloping across x): the pads close along y, on the roof's
    upright ends, although both sides are as wide."""
    tilt = np.array([[math.cos(0.8), 0, math.sin(0.8)], [0, 1, 0], [-math.sin(0.8), 0, math.cos(0.8)]])
    scene = _scene(
        _box("milk_1", [0, 0, 0.055], [0.026, 0.026, 0.055]),
        _box("milk_1", [-0.012, 0, 0.133], [0.002, 0.026, 0.014], tilt),
        _box("milk_1", [0.012, 0, 0.133], [0.002, 0.026, 0.014], tilt.T),
    )
    top = scene["obstacles"]["aabb"][:, 5].max()
    assert upright_faces(scene["obstacles"], "milk_1", [0, 1, 0], top - 0.012) == 1.0
    assert upright_faces(scene["obstacles"], "milk_1", [1, 0, 0], top - 0.012) == 0.0
    scene["bodies"]["milk_1"] = {
        "aabb": np.array([-0.026, -0.026, 0.0, 0.026, 0.026, top]),
        "local_aabb": np.array([-0.026, -0.026, 0.0, 0.026, 0.026, top]),
        "pos": np.zeros(3),
        "mat": np.eye(3),
    }
    point, line, _, _ = box_grasp(scene, "milk_1")
    assert np.allclose(np.abs(line), [0, 1, 0]) and np.allclose(point[:2], 0)


def test_a_box_grasp_turns_the_hand_away_from_a_tall_neighbour():
    """Cream cheese (8.1 x 4.3 cm, long side along x) with a carton 7.6 cm away along y: straight across,
    the hand (21 cm along the finger line) would come down on the carton; the grasp turns or moves along
    the box instead, and the hand comes down from above the carton."""
    cheese = {
        "aabb": np.array([-0.0405, -0.0215, 0.437, 0.0405, 0.0215, 0.455]),
        "local_aabb": np.array([-0.0405, -0.0215, -0.009, 0.0405, 0.0215, 0.009]),
        "pos": np.array([0.0, 0.0, 0.446]),
        "mat": np.eye(3),
    }
    alone = _scene(_box("cream_cheese_1", [0, 0, 0.446], [0.0405, 0.0215, 0.009]), bodies={"cream_cheese_1": cheese})
    point, line, _, level = box_grasp(alone, "cream_cheese_1")
    assert np.allclose(np.abs(line), [0, 1, 0]) and np.allclose(point[:2], 0) and level == -0.75
    crowded = _scene(
        _box("cream_cheese_1", [0, 0, 0.446], [0.0405, 0.0215, 0.009]),
        _box("milk_1", [-0.03, 0.076, 0.5], [0.026, 0.026, 0.065]),
        bodies={"cream_cheese_1": cheese},
    )
    point, line, clear, _ = box_grasp(crowded, "cream_cheese_1")
    assert not np.allclose(np.abs(line), [0, 1, 0]) or not np.allclose(point[:2], 0)
    hand = Boxes(crowded["obstacles"]).without("cream_cheese_1")
    straight = hand.distance(rectangle([0, 0], [0, 1], 0.106, 0.045))
    assert hand.distance(rectangle(point, line, 0.106, 0.045)) > straight
    episode = Episode([["in", "cream_cheese_1", "basket_1_contain_region"]])
    episode._plan_grasp(dict(crowded, eef_pos=np.array([0, 0, 0.7]), robot_base=np.array([-0.5, 0, 0.42])))
    assert episode.hover_z > 0.565 - 0.023  # the hand's underside above the carton's top


def test_surface_is_the_table_or_the_floor():
    bodies = {"a": {"aabb": np.array([0, 0, 0.437, 1, 1, 0.5])}, "b": {"aabb": np.array([0, 0, 0.44, 1, 1, 0.6])}}
    assert surface({"bodies": bodies}) == 0.437


def test_a_mugs_rim_leaves_out_its_handle():
    """A mug: four wall boxes reaching its top (a 9.6 cm rim around (0, 0)) and a lower handle outside them. The
    rim's centre and radius come from the walls alone, the handle is an obstacle for the fingers, and the
    grasp goes to the rim's far side from it."""
    walls = [
        _box("porcelain_mug_1", [0.046, 0, 0.07], [0.002, 0.04, 0.035]),
        _box("porcelain_mug_1", [-0.046, 0, 0.07], [0.002, 0.04, 0.035]),
        _box("porcelain_mug_1", [0, 0.046, 0.07], [0.04, 0.002, 0.035]),
        _box("porcelain_mug_1", [0, -0.046, 0.07], [0.04, 0.002, 0.035]),
    ]
    handle = _box("porcelain_mug_1", [0.065, 0, 0.06], [0.015, 0.004, 0.02])
    scene = _scene(*walls, handle)
    centre, rim, is_handle = mug_rim(scene["obstacles"], "porcelain_mug_1")
    assert np.allclose(centre[:2], 0) and rim == pytest.approx(0.048) and is_handle.tolist() == [False] * 4 + [True]
    scene["bodies"]["porcelain_mug_1"] = {
        "aabb": np.array([-0.048, -0.048, 0.035, 0.08, 0.048, 0.105]),
        "local_aabb": np.array([-0.048, -0.048, -0.035, 0.08, 0.048, 0.035]),
        "pos": np.array([0.0, 0.0, 0.07]),
        "mat": np.eye(3),
    }
    scene["robot_base"] = np.array([-0.5, 0.0, 0.0])
    point, line, _ = rim_grasp(scene, "porcelain_mug_1", np.array([0.0, 0.3, 0.05]), [])
    assert np.linalg.norm(point[:2]) == pytest.approx(0.045) and point[0] < 0.03  # not at the handle


def test_after_giving_up_on_an_object_the_next_approach_crosses_at_the_height_it_left():
    """Four missed grasps give the object up (retreat, then the goal's next pick and place, as libero_10's two-object
    tasks do now and then); the next object's approach crosses at the retreat's height, as after a placement (it
    raised AttributeError: no placement had set that height; 2026-12-07, a dataset of 360 demonstrations lost at 320)."""
    episode = Episode(
        [["in", "alphabet_soup_1", "basket_1_contain_region"], ["in", "cream_cheese_1", "basket_1_contain_region"]]
    )
    episode.finger_line = np.array([0.0, 1.0, 0.0])
    episode.grasp = np.array([0.1, 0.0, 0.9])
    for _ in range(4):
        episode._retry(_state())
    assert episode.phase == "retreat" and episode.travel_z == pytest.approx(1.08)
    assert episode.next_step() and episode.obj == "cream_cheese_1"
    episode.phase, episode.grasp, episode.hover_z, episode.ready = "approach", np.array([0.3, 0.0, 0.9]), 0.95, OPEN
    action = episode._grasp_phases(_state())
    assert action[0] > 0 and action[2] > 0  # across towards the grasp, and up to 1.08 (above the hover height)
