"""`vlabench train-ladder` over several LIBERO suites: every rung evaluated on each suite (one `vlabench eval` a
suite, so that one suite's failure keeps the others' counts), --resume evaluating only the suites missing, the table's
column per suite beside the published per-suite rates (naming their source), and the gate's verdict per suite."""

import json
from pathlib import Path

import pytest
from sim_ready import sim_unready

from harness.cli import main
from harness.stats.rates import rate_summary

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "pi05-libero-train.yaml"
SUITES = "libero_spatial,libero_object"


def _argv(out: Path, *extra: str) -> list[str]:
    """The CPU smoke of the real scenario over two suites: 4 steps per rung, one task, two trials of 10 steps."""
    return [
        "train-ladder", str(SCENARIO), "--target", "cpu", "--suites", SUITES, "--steps", "4", "--trials", "2",
        "--tasks", "0", "--sim-workers", "1", "--max-steps", "10", "--device", "cpu", "--loader-workers", "0",
        "--out", str(out), *extra,
    ]  # fmt: skip


def _rates(suite: str, successes: int, trials: int) -> dict:
    """A suite's success_rate entries as `vlabench eval` records them: the suite's and its one task's."""
    entry = {**rate_summary(successes, trials), "errors": 0}
    return {suite: entry, f"{suite}/0": entry}


def _stand_ins(monkeypatch, tmp_path: Path, broken: set) -> list[tuple]:
    """`vlabench train` and `vlabench eval` stood in for: fp8 succeeds 12 points below community on libero_object;
    the evaluation of a (rung, seed, suite) in `broken` raises. Returns what ran: ("train", rung, seed) and
    ("eval", rung, seed, suite)."""
    from harness.commands import train_ladder as ladder_command
    from harness.eval import main as eval_main
    from harness.train import ladder_run, loop

    monkeypatch.setattr(
        ladder_command, "_dataset", lambda scenario, target, given: str(tmp_path / "ds")
    )  # not made here
    monkeypatch.setattr(ladder_run, "unsupported", lambda plan, rung: None)  # fp8 "trains" on the CPU here
    ran = []

    def train(plan, command):
        ran.append(("train", plan.rung, plan.seed))
        checkpoint = plan.out / "checkpoints" / "step-00000004"
        checkpoint.mkdir(parents=True)
        run = {"rung": plan.rung, "steps_done": plan.steps, "steps_planned": plan.steps, "losses": [0.1] * 4,
               "final_loss": 0.1, "samples_per_s": 10.0, "wall_s": 60.0, "seed": plan.seed,
               "checkpoints": [{"step": 4, "path": str(checkpoint)}]}  # fmt: skip
        result = {"schema": "vlabench.result/1", "kind": "train", "scenario": {"name": "s"}, "target": {"name": "cpu"},
                  "provenance": {}, "workload": {"model": "pi05"}, "rungs": [], "train": run}  # fmt: skip
        (plan.out / "train.json").write_text(json.dumps(result))  # read again by --resume
        return result

    def run_eval(cfg, command, progress=None):
        (suite,) = cfg.suites
        rung, seed = cfg.scenario["rung"], json.loads(Path(cfg.checkpoint, "../../train.json").read_text())["train"]
        ran.append(("eval", rung, seed["seed"], suite))
        if (rung, seed["seed"], suite) in broken:
            raise RuntimeError(f"no {suite} assets")
        Path(cfg.out).write_text("{}")
        k = 15 - (6 if (rung, suite) == ("fp8", "libero_object") else 0)
        return {"success_rate": _rates(suite, k, 20), "throughput": {"episodes_per_s": 1.0}, "episodes": []}

    monkeypatch.setattr(loop, "train", train)
    monkeypatch.setattr(eval_main, "run_eval", run_eval)
    return ran


def test_each_suite_is_evaluated_a_failed_one_recorded_and_resumed_per_suite(tmp_path, monkeypatch, capsys):
    """--suites A,B with --seeds 2: each rung evaluated once per suite and seed, into eval-<suite>.json; fp8's
    libero_object evaluation of seed 0 fails: recorded with its error beside its libero_spatial counts (exit 1);
    --resume evaluates only that suite (nothing trains again), and the table shows a column per suite."""
    broken = {("fp8", 0, "libero_object")}
    ran = _stand_ins(monkeypatch, tmp_path, broken)
    out = tmp_path / "tl"
    assert main(_argv(out, "--rungs", "community,fp8", "--seeds", "2")) == 1
    evals = [r[1:] for r in ran if r[0] == "eval"]
    assert len(evals) == 8 and ("fp8", 1, "libero_object") in evals
    assert (out / "seed-1" / "fp8" / "eval-libero_object.json").exists()
    assert not (out / "seed-1" / "fp8" / "eval.json").exists()
    ladder = json.loads((out / "train-ladder.json").read_text())["train_ladder"]
    assert ladder["eval"]["suites"] == ["libero_spatial", "libero_object"]
    fp8 = ladder["seed_runs"][0]["rungs"][1]
    assert fp8["status"] == "ok" and fp8["suite_errors"] == {"libero_object": fp8["suite_errors"]["libero_object"]}
    assert "RuntimeError: no libero_object assets" in fp8["suite_errors"]["libero_object"]
    assert sorted(fp8["success_rate"]) == ["libero_spatial", "libero_spatial/0"]
    assert fp8["eval_throughput"] == {"libero_spatial": {"episodes_per_s": 1.0}}
    assert "evaluation on libero_object failed: RuntimeError" in capsys.readouterr().out

    ran.clear()
    broken.clear()  # the suite's assets are there now
    assert main(_argv(out, "--rungs", "community,fp8", "--seeds", "2", "--resume")) == 0
    assert ran == [("eval", "fp8", 0, "libero_object")]  # the other suites and seeds are done; nothing trains
    ladder = json.loads((out / "train-ladder.json").read_text())["train_ladder"]
    fp8 = ladder["seed_runs"][0]["rungs"][1]
    assert "suite_errors" not in fp8 and sorted(k for k in fp8["success_rate"] if "/" not in k) == [
        "libero_object",
        "libero_spatial",
    ]
    table = capsys.readouterr().out
    assert "libero_spatial success [95%]" in table and "libero_object success [95%]" in table
    row = next(line for line in table.splitlines() if line.startswith("fp8"))
    assert "75%, 75% (mean 75.0%)" in row and "45%, 45% (mean 45.0%)" in row
    assert "libero_spatial: n/a: 2 seeds" in row and "libero_object: n/a: 2 seeds" in row
    ran.clear()  # --resume without --suites continues with the ladder's suites: every one is done
    argv = [
        a for a in _argv(out, "--rungs", "community,fp8", "--seeds", "2", "--resume") if a not in ("--suites", SUITES)
    ]
    assert main(argv) == 0 and ran == []
    assert "libero_object success [95%]" in capsys.readouterr().out
    assert main(["train-seeds", str(out / "train-ladder.json")]) == 3  # 2 seeds: n/a, as inconclusive
    rows = [line.split("  ")[0] for line in capsys.readouterr().out.splitlines()[3:-1]]
    assert rows == ["community libero_spatial", "community libero_object", "fp8 libero_spatial", "fp8 libero_object"]


def test_a_rung_whose_every_suite_failed_is_an_evaluation_error_and_bad_suites_are_one_line(
    tmp_path, monkeypatch, capsys
):
    broken = {("community", 0, "libero_spatial"), ("community", 0, "libero_object")}
    _stand_ins(monkeypatch, tmp_path, broken)
    assert main(_argv(tmp_path / "tl", "--rungs", "community")) == 1
    (community,) = json.loads((tmp_path / "tl" / "train-ladder.json").read_text())["train_ladder"]["rungs"]
    assert community["status"] == "error" and community["stage"] == "evaluation"
    assert community["error"].startswith("libero_spatial: RuntimeError") and "; libero_object: " in community["error"]
    capsys.readouterr()
    assert main(_argv(tmp_path / "o2", "--suites", "libero_spatial,libero_nope")) == 2
    err = capsys.readouterr().err
    assert "--suites: expected LIBERO suites (libero_spatial" in err and "libero_nope" in err
    assert len(err.strip().splitlines()) == 1


def _rung(name: str, counts: dict[str, tuple[int, int]], error: dict | None = None) -> dict:
    rates = {}
    for suite, (k, n) in counts.items():
        rates |= _rates(suite, k, n)
    train = {"rung": name, "losses": [0.1] * 10, "samples_per_s": 100.0, "steps_done": 10, "steps_planned": 10}
    return {
        "name": name,
        "status": "ok",
        "train": train,
        "success_rate": rates,
        **({"suite_errors": error} if error else {}),
    }


def _result(path: Path, rungs: list[dict], model: str = "pi05") -> Path:
    result = {
        "schema": "vlabench.result/1",
        "kind": "train-ladder",
        "scenario": {"name": "pi05-libero-train", "sha256": "x"},
        "target": {"name": "h200"},
        "provenance": {"git_sha": "abc", "dirty": False},
        "workload": {"model": model, "batch_size": 64, "seed": 0},
        "rungs": [],
        "train_ladder": {
            "reference": "community",
            "steps": 10,
            "convergence_tolerance": 0.1,
            "rungs": rungs,
            "eval": {"suites": ["libero_spatial", "libero_object"], "trials": 10},
        },
    }
    path.write_text(json.dumps(result))
    return path


def test_the_table_has_a_column_per_suite_and_the_published_rates_with_their_source(tmp_path, capsys):
    """A hand-built two-suite result, checked on load by `vlabench show`: a success column per suite, a suite whose
    evaluation failed gives its error in its column, and LoongForge's published per-suite rates (and the community
    policy's) stand as rows of their own under the suites' columns, their source named; a ladder of another model
    family gets none."""
    community = _rung("community", {"libero_spatial": (80, 100), "libero_object": (90, 100)})
    fp8 = _rung("fp8", {"libero_spatial": (78, 100)}, error={"libero_object": "RuntimeError: no assets (at x.py:1)"})
    path = _result(tmp_path / "tl.json", [community, fp8])
    assert main(["show", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1]
    assert header.index("libero_spatial success [95%]") < header.index("libero_object success [95%]")
    fp8_row = next(line for line in lines if line.startswith("fp8"))
    assert "78.0% [69%-85%] (78/100)" in fp8_row and "error: RuntimeError: no assets" in fp8_row
    assert "libero_spatial: -2.0 points" in fp8_row and "libero_object: missing, the suite was not evaluated" in fp8_row
    loongforge = next(line for line in lines if line.startswith("LoongForge bf16 (published)"))
    column = header.index("libero_spatial success [95%]")
    assert loongforge[column:].split()[:2] == ["99.6%", "99.6%"]  # spatial, object: their values as published
    assert next(line for line in lines if line.startswith("community (published)"))[column:].split()[:2] == [
        "97%",
        "99%",
    ]
    source = next(line for line in lines if line.startswith("published:"))
    assert "LoongForge engineering write-up on Pi0.5 SFT acceleration" in source
    assert "results/published/loongforge-pi05-libero.yaml" in source and "not judged here" in source
    assert main(["compare", str(path), "--out", str(tmp_path / "cmp")]) == 0  # the suites named in each cell
    assert "fp8        100/s; success libero_spatial 78% of 100" in capsys.readouterr().out
    assert main(["show", str(_result(tmp_path / "gr00t.json", [community], model="gr00t"))]) == 0
    assert "(published)" not in capsys.readouterr().out  # no published success rate is a gr00t policy's
    bad = json.loads(path.read_text())
    bad["train_ladder"]["rungs"][1]["suite_errors"] = {"libero_object": 3}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["show", str(tmp_path / "bad.json")]) == 2
    assert "train_ladder.rungs[1].suite_errors" in capsys.readouterr().err


def test_the_gate_judges_each_suite_and_one_failing_suite_fails_the_verdict(tmp_path, capsys):
    """`vlabench gate` of two-suite train-ladders: a verdict line per rung and suite (and task); libero_object
    dropping 40 points FAILs while libero_spatial passes, and the verdict is a regression (exit 1); a suite whose
    evaluation failed FAILs once, naming the error."""
    base = _result(tmp_path / "base.json", [_rung("fp8", {"libero_spatial": (80, 100), "libero_object": (90, 100)})])
    dropped = _result(tmp_path / "cur.json", [_rung("fp8", {"libero_spatial": (80, 100), "libero_object": (50, 100)})])
    assert main(["gate", str(dropped), "--baseline", str(base)]) == 1
    out = capsys.readouterr().out
    lines = {line.split("  ")[0]: line for line in out.splitlines() if line.startswith("fp8 libero")}
    assert " pass " in lines["fp8 libero_spatial"] and " FAIL " in lines["fp8 libero_object"]
    assert "REGRESSION: 2 of 5 checks failed: fp8 libero_object success rate (-40.0 points); fp8 libero_object/0" in out
    failed = _rung("fp8", {"libero_spatial": (80, 100)}, error={"libero_object": "RuntimeError: no assets"})
    assert main(["gate", str(_result(tmp_path / "err.json", [failed])), "--baseline", str(base)]) == 1
    out = capsys.readouterr().out
    assert "its evaluation failed: RuntimeError: no assets" in out and "fp8 libero_object/0" not in out
    assert main(["gate", str(base), "--baseline", str(base)]) == 0


@pytest.mark.slow
@pytest.mark.skipif(sim_unready() is not None, reason=str(sim_unready()))
def test_two_suites_train_and_evaluate_on_the_cpu(tmp_path, monkeypatch, capsys):
    """The real path over two suites (one rung, 4 steps, 2 trials of 10 steps a suite): one eval file per suite,
    the record's counts of both, a column each in the table and a verdict line each in the gate."""
    monkeypatch.chdir(tmp_path)  # the CPU target's dataset is made under runs/datasets here
    out = tmp_path / "tl"
    assert main(_argv(out, "--rungs", "community")) == 0
    (community,) = json.loads((out / "train-ladder.json").read_text())["train_ladder"]["rungs"]
    assert community["status"] == "ok" and "suite_errors" not in community
    for suite in SUITES.split(","):
        evaluated = json.loads((out / "community" / f"eval-{suite}.json").read_text())
        assert [e["suite"] for e in evaluated["episodes"]] == [suite, suite]
        assert community["success_rate"][suite]["trials"] == 2 and community["success_rate"][f"{suite}/0"]
    table = capsys.readouterr().out
    assert "libero_spatial success [95%]" in table and "libero_object success [95%]" in table
    assert main(["gate", str(out / "train-ladder.json"), "--baseline", str(out / "train-ladder.json")]) == 3
    gate = capsys.readouterr().out
    assert "community libero_spatial " in gate and "community libero_object " in gate


@pytest.mark.skipif(sim_unready() is not None, reason=str(sim_unready()))
def test_a_ladder_on_a_dataset_of_several_suites_is_evaluated_on_the_tasks_it_demonstrates(
    tmp_path, monkeypatch, capsys
):
    """--dataset trains every rung on a dataset other than the workload's (make-dataset --suite of several suites);
    --tasks demonstrated evaluates each suite on the tasks the dataset has demonstrations of (libero_goal's task 1
    here, not its others), which the table's title says and --resume keeps. A suite with none, or a dataset that is
    not one, is refused in one line before anything trains."""
    import dataclasses

    from harness.commands import train_ladder as ladder_command
    from harness.data import lerobot_format as fmt
    from harness.data.synthetic import synthetic_episodes
    from harness.data.writer import write_dataset
    from harness.eval import main as eval_main

    instructions = ["pick up the black bowl between the plate and the ramekin and place it on the plate",
                    "put the bowl on the stove"]  # libero_spatial's task 0, libero_goal's task 1  # fmt: skip
    episodes = synthetic_episodes(2, seed=1, image_size=64, lengths=(12, 14))
    dataset = tmp_path / "two-suites"
    write_dataset(dataset, (dataclasses.replace(e, task=t) for e, t in zip(episodes, instructions)),
                  fmt.libero_features(64))  # fmt: skip
    real_dataset = ladder_command._dataset
    ran = _stand_ins(monkeypatch, tmp_path, broken=set())
    monkeypatch.setattr(ladder_command, "_dataset", real_dataset)
    tasks, stand_in = {}, eval_main.run_eval

    def run_eval(cfg, command, progress=None):
        tasks[cfg.scenario["rung"], cfg.suites[0]] = cfg.tasks
        return stand_in(cfg, command, progress)

    monkeypatch.setattr(eval_main, "run_eval", run_eval)
    argv = [a if a != SUITES else "libero_spatial,libero_goal" for a in _argv(tmp_path / "tl")]
    argv[argv.index("--tasks") + 1] = "demonstrated"
    assert main([*argv, "--rungs", "community", "--dataset", str(dataset)]) == 0, capsys.readouterr().err
    assert tasks == {("community", "libero_spatial"): [0], ("community", "libero_goal"): [1]}
    result = json.loads((tmp_path / "tl" / "train-ladder.json").read_text())
    assert (
        result["train_ladder"]["dataset"] == str(dataset) and result["train_ladder"]["eval"]["tasks"] == "demonstrated"
    )
    assert "2 trials per task (the tasks the training dataset demonstrates)" in capsys.readouterr().out
    resumed = [a for a in argv if a not in ("--tasks", "demonstrated")]
    assert main([*resumed, "--rungs", "community,fp8", "--dataset", str(dataset), "--resume"]) == 0
    assert tasks[("fp8", "libero_goal")] == [1] and ran[-1] == ("eval", "fp8", 0, "libero_goal")
    capsys.readouterr()
    other = [a if a != "libero_spatial,libero_goal" else "libero_spatial,libero_object" for a in argv]
    assert main([*other, "--out", str(tmp_path / "tl2"), "--dataset", str(dataset)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--tasks: expected suites with tasks that the dataset at" in err and "none of libero_object's" in err
    assert main([*argv, "--out", str(tmp_path / "tl3"), "--dataset", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing" in err and "no such folder" in err and len(err.splitlines()) == 1
