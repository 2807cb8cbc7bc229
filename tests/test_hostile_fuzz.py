"""A seeded fuzz over the scenario and result schemas: a real scenario and real committed results, each mutated at
random places (a value replaced by another type, a huge, negative or non-finite number, odd text, a key dropped or
an unknown one added), must load or be refused in one line; never a traceback. Every case is reproducible from its
seed (the failure message names it)."""

import copy
import json
import math
import random
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.errors import InputError
from harness.machine.hardware import get_target
from harness.scenario import load_scenario
from harness.spec import scenario_spec

ROOT = Path(__file__).resolve().parents[1]
SCENARIO_CASES = 120  # per scenario file: 360 scenarios
RESULT_CASES = 30  # per result file, each shown and gated: 300 commands; all of it about half a minute on 2 cores

ODD_VALUES = [
    None,
    True,
    0,
    -1,
    10**30,
    -(10**30),
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    0.5,
    "",
    "x" * 500,
    "../../etc/passwd",
    "a\nb\tc",
    "\u00e9\u4e2d",
    [],
    [1, "a", None],
    {},
    {"unknown": 1},
    [[[[[]]]]],
]


def paths(node, prefix=()):
    """Every key path into a nested dict/list, the root excluded."""
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for k, v in items:
        yield (*prefix, k)
        yield from paths(v, (*prefix, k))


def mutate(doc, rng: random.Random, times: int):
    doc = copy.deepcopy(doc)
    for _ in range(times):
        where = list(paths(doc))
        if not where:
            break
        path = rng.choice(where)
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        action = rng.random()
        if action < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.25 and isinstance(parent, dict):
            parent[f"unknown_{rng.randrange(100)}"] = rng.choice(ODD_VALUES)
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
    return doc


@pytest.mark.parametrize("scenario", ["pi05-loongforge", "gr00t-loongforge", "pi05-beyond"])
def test_mutated_scenarios_load_or_are_refused_in_one_line(tmp_path, scenario):
    base = yaml.safe_load((ROOT / "scenarios" / f"{scenario}.yaml").read_text())
    base.pop("memory", None)  # its paths are relative to scenarios/; the copy lives elsewhere
    for seed in range(SCENARIO_CASES):
        rng = random.Random(seed)
        doc = mutate(base, rng, rng.randint(1, 3))
        path = tmp_path / f"{seed}.yaml"
        # the YAML as a user would write it (non-finite floats and odd keys included)
        path.write_text(yaml.safe_dump(doc, allow_unicode=True))
        try:
            loaded = load_scenario(path)
            for rung in loaded.ladder:  # the spec a rung process would get, as `run` builds it
                scenario_spec(loaded, get_target("cpu"), rung)
        except InputError:
            pass
        except Exception as e:  # noqa: BLE001 - the test is that nothing else escapes
            pytest.fail(f"{scenario} seed {seed}: {type(e).__name__}: {e}")


@pytest.mark.parametrize(
    "result",
    [
        "h200/pi05-loongforge.json",
        "h100/pi05-beyond.json",
        "h200/gr00t-loongforge.json",
        "cpu/libero-expert-ci.json",
        "h100/ab/gr00t-loongforge-community-slow10-c5ac1d7/ab.json",  # an A/B: a kind with a schema of its own
    ],
)
def test_mutated_results_show_and_gate_in_one_line(tmp_path, capsys, result):
    """`show` and `gate` of a mutated copy exit 0-3 (2: refused in one line), never 4 (an internal failure with a
    logged traceback)."""
    base = json.loads((ROOT / "results" / result).read_text())
    baseline = ROOT / "results" / result
    for seed in range(RESULT_CASES):
        rng = random.Random(seed)
        path = tmp_path / f"{seed}.json"
        path.write_text(json.dumps(mutate(base, rng, rng.randint(1, 3))))
        for argv in (["show", str(path)], ["gate", str(path), "--baseline", str(baseline)]):
            code = main(argv)
            err = capsys.readouterr().err
            assert code in (0, 1, 2, 3), f"{result} seed {seed}: {' '.join(argv[:1])} exit {code}: {err[-400:]}"
            if code == 2:
                assert len(err.strip().splitlines()) == 1, f"{result} seed {seed}: {err}"
