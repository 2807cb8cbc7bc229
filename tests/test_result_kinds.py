"""Result kinds (harness/kinds): a kind is one registered class, found by `kind_of`; a new kind added by one
class (here registered from the test) is loaded, checked and shown by `vlabench show` with no other change; every
committed result that loads is recognised as exactly one kind."""

import json
from pathlib import Path

import pytest

from harness import kinds
from harness.cli import main
from harness.outputs import describe_existing
from harness.results import SCHEMA, ResultError, load_result
from models.schema import SchemaError

ROOT = Path(__file__).resolve().parent.parent


class Toy(kinds.ResultKind):
    """A toy kind: `kind: toy` and a `toy` block whose score is a non-negative integer."""

    name = "toy"
    key = "toy"

    def check(self, data: dict) -> None:
        super().check(data)
        score = (data.get("toy") or {}).get("score")
        if not isinstance(score, int) or score < 0:
            raise SchemaError("toy.score", "a non-negative integer", repr(score))

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        return f"toy table of {data['scenario']['name']}: score {data['toy']['score']}"


@pytest.fixture
def toy_kind():
    kinds.register(Toy)
    try:
        yield kinds.get("toy")
    finally:
        kinds.unregister("toy")


def toy_file(tmp_path: Path, score) -> Path:
    data = {
        "schema": SCHEMA,
        "kind": "toy",
        "scenario": {"name": "toy-scenario"},
        "target": {"name": "cpu"},
        "provenance": {},
        "workload": {},
        "rungs": [],
        "toy": {"score": score},
    }
    path = tmp_path / f"toy-{score}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_toy_kind_registered_once_is_loaded_checked_and_shown(tmp_path, capsys, toy_kind):
    good = toy_file(tmp_path, 3)
    assert kinds.kind_of(load_result(good)) is toy_kind
    assert main(["show", str(good)]) == 0
    assert "toy table of toy-scenario: score 3" in capsys.readouterr().out
    assert main(["show", str(toy_file(tmp_path, -1))]) == 2  # its own load-time check refuses, in one line
    err = capsys.readouterr().err.strip()
    assert "toy.score: expected a non-negative integer, got -1" in err and len(err.splitlines()) == 1
    assert describe_existing(good) == "toy result of toy-scenario on cpu with 0 rungs"


def test_without_the_toy_kind_its_file_is_refused_naming_the_kind(tmp_path, capsys):
    path = toy_file(tmp_path, 3)
    with pytest.raises(ResultError, match="kind: expected a kind of result file .*got 'toy'"):
        load_result(path)
    assert main(["show", str(path)]) == 2


def test_a_kind_is_registered_once(toy_kind):
    with pytest.raises(ValueError, match="registered already"):
        kinds.register(Toy)
    with pytest.raises(kinds.UnknownKind):
        kinds.get("no-such-kind")


def test_every_registered_kind_has_its_own_name():
    names = [k.name for k in kinds.kinds()]
    assert len(names) == len(set(names))
    assert {"ladder", "profile", "floor", "recompute-sweep", "train", "train-ladder", "eval"} <= set(names)


def committed_json() -> list[Path]:
    return sorted(ROOT.glob("results/**/*.json"))


def test_every_committed_result_that_loads_is_exactly_one_kind():
    seen = set()
    for path in committed_json():
        try:
            data = load_result(path)
        except ResultError:
            continue  # not a result file `show` reads (a profile, a reference script's output)
        matched = [k.name for k in kinds.kinds() if k.recognise(data)]
        assert len(matched) == 1, f"{path}: recognised as {matched}"
        seen.add(matched[0])
    assert {"ladder", "floor", "recompute-sweep", "train", "train-ladder", "eval"} <= seen


def test_a_committed_profile_is_recognised_as_a_profile_and_described_as_before():
    profiles = [p for p in committed_json() if "rung" in (d := json.loads(p.read_text())) and "steps" in d]
    assert profiles
    for path in profiles:
        data = json.loads(path.read_text())
        assert kinds.find(data) is kinds.get("profile"), path
        scenario = data["scenario"]["name"] if isinstance(data["scenario"], dict) else data["scenario"]
        assert describe_existing(path).startswith(f"profile of {scenario}/{data['rung']} on "), path
