"""`vlabench train-ladder` (train -> evaluate -> gate as one scenario) on the CPU: the whole path at tiny size with
the real scenario file, --resume, one-line refusals, and the gate of two train-ladder results (success and
convergence) on result files."""

import copy
import json
import re
from pathlib import Path

import pytest
from sim_ready import sim_unready

from harness.cli import main
from harness.data.fingerprint import dataset_fingerprint

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "pi05-libero-train.yaml"


def _smoke(out: Path, *extra: str) -> list[str]:
    """The CPU smoke of the real scenario: 4 steps per rung, one task, two trials of 10 steps."""
    return [
        "train-ladder", str(SCENARIO), "--target", "cpu", "--steps", "4", "--trials", "2", "--tasks", "0",
        "--sim-workers", "1", "--max-steps", "10", "--device", "cpu", "--loader-workers", "0", "--out", str(out), *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def cpu_workdir(tmp_path_factory) -> Path:
    """The CPU smokes' working folder: the CPU target's dataset is made under runs/datasets there once, for both."""
    return tmp_path_factory.mktemp("cpu-target")


@pytest.mark.slow
@pytest.mark.skipif(sim_unready() is not None, reason=str(sim_unready()))
def test_the_scenario_trains_evaluates_and_gates_on_the_cpu(tmp_path, monkeypatch, capsys, cpu_workdir):
    """A checkpoint that loads, an eval result, the judgement against the reference and a gate verdict; an
    unsupported rung is recorded and the ladder goes on; --resume keeps what is done."""
    monkeypatch.chdir(cpu_workdir)  # the CPU target's dataset is made under runs/datasets there
    out = tmp_path / "tl"
    assert main(_smoke(out, "--rungs", "community,fp8")) == 0  # fp8 cannot train on a CPU: recorded unsupported
    result = json.loads((out / "train-ladder.json").read_text())
    assert result["kind"] == "train-ladder" and result["target"]["name"] == "cpu"
    rungs = {r["name"]: r for r in result["train_ladder"]["rungs"]}
    community, fp8 = rungs["community"], rungs["fp8"]
    assert community["status"] == "ok" and community["train"]["steps_done"] == 4
    assert Path(community["checkpoint"], "model.safetensors").exists()
    assert community["success_rate"]["libero_spatial"]["trials"] == 2
    evaluated = json.loads((out / "community" / "eval.json").read_text())
    assert evaluated["policy"]["checkpoint"] == community["checkpoint"] and len(evaluated["episodes"]) == 2
    assert fp8["status"] == "unsupported" and "FP8" in fp8["error"]
    assert result["train_ladder"]["eval"]["trials"] == 2 and result["train_ladder"]["steps"] == 4
    capsys.readouterr()
    assert main(["show", str(out / "train-ladder.json")]) == 0
    table = capsys.readouterr().out
    assert "community" in table and "0.0% [0%-66%] (0/2)" in table and "unsupported" in table
    # 0 of 2 recorded: the success check cannot fail, and says so (exit 3: inconclusive)
    assert main(["gate", str(out / "train-ladder.json"), "--baseline", str(out / "train-ladder.json")]) == 3
    assert "leaves no room for a drop" in capsys.readouterr().out
    mtime = (out / "community" / "train.json").stat().st_mtime
    assert main(_smoke(out, "--rungs", "community", "--resume")) == 0
    assert "community: done already" in capsys.readouterr().out
    assert (out / "community" / "train.json").stat().st_mtime == mtime  # not trained again
    assert result["workload"]["seed"] == 0  # the workload's: no --seed
    assert main(_smoke(out, "--rungs", "community", "--resume", "--seed", "1")) == 2  # trained with seed 0
    assert "workload.seed: expected the seed of --seed (1), got 0" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(sim_unready() is not None, reason=str(sim_unready()))
def test_two_seeds_train_and_evaluate_on_the_cpu(tmp_path, monkeypatch, capsys, cpu_workdir):
    """train-ladder --seeds 2 --curve-every 2 of the real scenario on the CPU (one rung, 4 steps, 2 trials of 10
    steps per seed): each seed's checkpoint and evaluation in its folder, the two trained from different initial
    weights, a table that gives the rates with no verdict word (2 seeds), and each seed's success curve: the
    checkpoint of step 2 kept and evaluated as the last one is, beside the last's counts, each with its wall time."""
    monkeypatch.chdir(cpu_workdir)  # the CPU target's dataset is made under runs/datasets there
    out = tmp_path / "tl"
    assert main(_smoke(out, "--rungs", "community", "--seeds", "2", "--curve-every", "2")) == 0
    ladder = json.loads((out / "train-ladder.json").read_text())["train_ladder"]
    runs = {run["seed"]: run["rungs"][0] for run in ladder["seed_runs"]}
    assert sorted(runs) == [0, 1] and all(r["status"] == "ok" for r in runs.values())
    for seed, record in runs.items():
        assert Path(record["checkpoint"], "model.safetensors").exists() and record["dir"] == f"seed-{seed}/community"
        assert json.loads((out / record["dir"] / "train.json").read_text())["workload"]["seed"] == seed
        assert record["success_rate"]["libero_spatial"]["trials"] == 2
        curve = record["curve"]
        assert [p["step"] for p in curve] == [2, 4] and 0 < curve[0]["wall_s"] < curve[1]["wall_s"]
        assert curve[1]["wall_s"] == record["train"]["wall_s"]  # the last point: the whole training
        assert curve[1]["success_rate"]["libero_spatial"] == record["success_rate"]["libero_spatial"]
        early = json.loads((out / record["dir"] / "eval-step-00000002.json").read_text())
        assert early["policy"]["checkpoint"].endswith("step-00000002")
        assert curve[0]["success_rate"]["libero_spatial"] == early["success_rate"]["libero_spatial"]
    assert runs[0]["train"]["losses"][0] != runs[1]["train"]["losses"][0]  # other initial weights and draws
    out_lines = capsys.readouterr().out.splitlines()
    row = next(line for line in out_lines if line.startswith("community"))
    assert row.split()[1] == "2" and "reference" in row
    title = out_lines.index(next(line for line in out_lines if line.startswith("success against training time")))
    curve_rows = [line.split() for line in out_lines[title + 3 : title + 7]]
    assert [(r[0], r[1], r[2]) for r in curve_rows] == [("community", s, step) for s in "01" for step in "24"]


def test_the_seed_reaches_every_rungs_training_and_the_result(tmp_path, monkeypatch):
    """--seed: the plan's seed (the workload's without it) goes to each rung's `vlabench train` and into the
    result's workload, which `vlabench show` prints."""
    import argparse

    from harness.commands import train_ladder as ladder_command
    from harness.report.train_ladder import train_ladder_table
    from harness.train import ladder_run, loop

    monkeypatch.setattr(ladder_command, "_dataset", lambda *_: str(tmp_path / "ds"))  # not made here
    parser = argparse.ArgumentParser()
    ladder_command.add_train_ladder_arguments(parser)
    plans = {
        seed: ladder_command.plan_from_args(parser.parse_args(_smoke(tmp_path / f"o{seed}", *flags)[1:]))
        for seed, flags in ((0, ()), (5, ("--seed", "5")))
    }
    assert plans[0].seed == 0 and plans[5].seed == 5  # the scenario's workload has seed 0
    trained = []
    monkeypatch.setattr(loop, "train", lambda plan, command: trained.append(plan))
    ladder_run.train_rung(plans[5], "community", ["vlabench"])
    assert trained[0].seed == 5 and trained[0].steps == 4
    header = ladder_run._header(plans[5], ["vlabench"])
    assert header["workload"]["seed"] == 5
    result = {**header, "train_ladder": ladder_run._ladder_block(plans[5], {}, lambda runs, ref, block: {})}
    assert "(fp32, seed 5, lr " in train_ladder_table(result).splitlines()[0]


def _fake_training_and_evaluation(monkeypatch, tmp_path: Path) -> list[tuple[str, int]]:
    """`vlabench train` and `vlabench eval` replaced by stand-ins that write what the ladder reads: each seed's
    fp8 succeeds 30 points below community; returns the (rung, seed) of each training run."""
    from harness.commands import train_ladder as ladder_command
    from harness.eval import main as eval_main
    from harness.train import ladder_run, loop

    monkeypatch.setattr(ladder_command, "_dataset", lambda *_: str(tmp_path / "ds"))  # not made here
    monkeypatch.setattr(ladder_run, "unsupported", lambda plan, rung: None)  # fp8 "trains" on the CPU here
    trained = []

    def train(plan, command):
        trained.append((plan.rung, plan.seed))
        checkpoint = plan.out / "checkpoints" / "step-00000004"
        checkpoint.mkdir(parents=True)
        loss = 0.1 + 0.01 * plan.seed
        run = {"rung": plan.rung, "steps_done": plan.steps, "steps_planned": plan.steps, "losses": [loss] * 4,
               "final_loss": loss, "samples_per_s": 10.0 if plan.rung == "community" else 30.0,
               "wall_s": 60.0 if plan.rung == "community" else 15.0, "seed": plan.seed,
               "checkpoints": [{"step": 4, "path": str(checkpoint)}],
               "data": {"data": {"episodes": 2, "frames": 40, "content": dataset_fingerprint(tmp_path / "ds")}}}  # fmt: skip
        result = {"kind": "train", "train": run}
        (plan.out / "train.json").write_text(json.dumps(result))
        return result

    def run_eval(cfg, command, progress=None):
        seed = json.loads((Path(cfg.checkpoint).parent.parent / "train.json").read_text())["train"]["seed"]
        k = 14 + seed - (6 if cfg.scenario["rung"] == "fp8" else 0)
        rate = {"successes": k, "trials": 20, "rate": k / 20, "wilson_low": 0.0, "wilson_high": 1.0, "errors": 0}
        Path(cfg.out).write_text("{}")
        return {"success_rate": {"libero_spatial": rate}, "episodes": []}

    monkeypatch.setattr(loop, "train", train)
    monkeypatch.setattr(eval_main, "run_eval", run_eval)
    return trained


def test_seeds_train_every_rung_per_seed_in_its_folder_resume_and_judge_over_them(tmp_path, monkeypatch, capsys):
    """--seeds N (training and evaluation stood in for: the CPU path of both is the slow test below): every rung
    trained and evaluated once per seed in OUT/seed-<S>/<rung>/, one train-ladder.json holding every seed's runs;
    two seeds give the figures and no verdict; --resume --seeds 3 trains only the third seed, and then the table
    judges: fp8's 30-point drop in every seed FAILs (exit 0: the ladder ran; the verdicts are the table's).
    --seed S --seeds N trains S..S+N-1; a resume of other seeds, or without --seeds, is refused in one line."""
    trained = _fake_training_and_evaluation(monkeypatch, tmp_path)
    out = tmp_path / "tl"
    assert main(_smoke(out, "--rungs", "community,fp8", "--seeds", "2")) == 0
    assert trained == [("community", 0), ("fp8", 0), ("community", 1), ("fp8", 1)]
    for seed in (0, 1):
        for rung in ("community", "fp8"):
            assert (out / f"seed-{seed}" / rung / "train.json").exists() and (
                out / f"seed-{seed}" / rung / "eval.json"
            ).exists()
    result = json.loads((out / "train-ladder.json").read_text())
    assert result["workload"]["seed"] == 0 and result["workload"]["seeds"] == [0, 1]
    ladder = result["train_ladder"]
    assert [run["seed"] for run in ladder["seed_runs"]] == [0, 1]
    assert [r["dir"] for r in ladder["rungs"]] == ["seed-0/community", "seed-0/fp8"]  # the first seed's
    over = ladder["versus_reference"]["fp8"]["over_seeds"]
    assert over["seeds"] == [0, 1] and over["success"][0]["verdict"] == "n/a" and over["wall_speedup"] == 4.0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("fp8"))
    assert "n/a: 2 seeds, verdicts need 3; mean -30.0 points" in row and " 4.00x " in row and " 3.00x " in row
    trained.clear()
    assert main(_smoke(out, "--rungs", "community,fp8", "--seeds", "3", "--resume")) == 0
    assert trained == [("community", 2), ("fp8", 2)]  # seeds 0 and 1 are done
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("fp8"))
    assert row.split()[1] == "3" and " FAIL (mean -30.0 points over 3 seeds" in row
    assert main(["show", str(out / "train-ladder.json")]) == 0
    assert " FAIL (mean -30.0 points over 3 seeds" in capsys.readouterr().out
    for flags, message in (
        (("--resume",), "train_ladder.seed_runs: expected a ladder of one seed (no --seeds)"),
        (("--resume", "--seeds", "2"), "workload.seeds: expected seeds among those of --seed/--seeds (0, 1), got [2]"),
        (("--resume", "--seed", "1", "--seeds", "3"), "workload.seed: expected the seed of --seed (1), got 0"),
        (("--seeds", "0"), "--seeds: expected a positive number of seeds"),
    ):
        assert main(_smoke(out, "--rungs", "community,fp8", *flags)) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    trained.clear()
    assert main(_smoke(tmp_path / "from5", "--rungs", "community", "--seed", "5", "--seeds", "2")) == 0
    assert trained == [("community", 5), ("community", 6)] and (tmp_path / "from5" / "seed-6" / "community").is_dir()


def test_a_ladder_is_not_continued_on_data_made_again_otherwise(tmp_path, monkeypatch, capsys):
    """A device machine makes its demonstrations again in each session, at the same path: --resume on a dataset
    whose content differs from what the trained rungs read is refused in one line, before anything trains."""
    trained = _fake_training_and_evaluation(monkeypatch, tmp_path)
    (tmp_path / "ds" / "data").mkdir(parents=True)
    (tmp_path / "ds" / "data" / "file-000.parquet").write_bytes(b"the demonstrations")
    out = tmp_path / "tl"
    assert main(_smoke(out, "--rungs", "community", "--seeds", "1")) == 0
    (tmp_path / "ds" / "data" / "file-000.parquet").write_bytes(b"other demonstrations")
    trained.clear()
    assert main(_smoke(out, "--rungs", "community", "--seeds", "2", "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert "seed 0, rung community: train.data.data.content: expected the dataset at" in err, err
    assert "differs in their tables" in err and len(err.splitlines()) == 1 and trained == []
    (tmp_path / "ds" / "data" / "file-000.parquet").write_bytes(b"the demonstrations")  # the same bytes again
    assert main(_smoke(out, "--rungs", "community", "--seeds", "2", "--resume")) == 0 and trained == [("community", 1)]


def _rung(name: str, successes: int, trials: int, losses: list[float], sabotaged: bool = False) -> dict:
    train = {"rung": name, "losses": losses, "samples_per_s": 100.0, "steps_done": len(losses)}
    if sabotaged:
        train["test_train_sabotage"] = {"mode": "freeze-time"}
    rate = {"successes": successes, "trials": trials, "rate": successes / trials, "wilson_low": 0.0,
            "wilson_high": 1.0, "errors": 0}  # fmt: skip
    return {"name": name, "status": "ok", "train": train, "success_rate": {"libero_spatial": rate}}


def _ladder_result(rung: dict) -> dict:
    return {
        "schema": "vlabench.result/1",
        "kind": "train-ladder",
        "scenario": {"name": "pi05-libero-train", "sha256": "x"},
        "target": {"name": "h200"},
        "provenance": {"git_sha": "abc", "dirty": False},
        "workload": {"model": "pi05", "batch_size": 64},
        "rungs": [],
        "train_ladder": {"reference": "community", "steps": 200, "convergence_tolerance": 0.1, "rungs": [rung]},
    }


def test_the_gate_fails_a_rung_that_learns_less(tmp_path, capsys):
    """Success 6/100 against 60/100 and a final loss 40% high: both checks FAIL (exit 1); the same rung against
    itself passes, and `record` refuses the sabotaged result."""
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(_ladder_result(_rung("compile-per-layer", 60, 100, [1.0] * 180 + [0.10] * 20))))
    bad = tmp_path / "sabotaged.json"
    bad.write_text(json.dumps(_ladder_result(_rung("compile-per-layer", 6, 100, [1.0] * 180 + [0.14] * 20, True))))
    assert main(["gate", str(bad), "--baseline", str(clean)]) == 1
    out = capsys.readouterr().out
    assert "compile-per-layer libero_spatial  success rate  FAIL" in out
    assert "compile-per-layer                 convergence   FAIL" in out and "+40.0%" in out
    assert "VLABENCH_TEST_TRAIN_SABOTAGE" in out
    assert "one training run per rung" in out and "throughput:" not in out  # what these checks measure
    assert main(["gate", str(clean), "--baseline", str(clean)]) == 0
    assert main(["record", str(bad), "--results-dir", str(tmp_path / "results")]) == 2
    assert "VLABENCH_TEST_TRAIN_SABOTAGE" in capsys.readouterr().err


def test_the_committed_h200_sabotage_fails_both_checks_against_its_clean_run(capsys):
    """The H200's evidence (results/h200/evidence/train-ladder-2026-12-02-sabotage/, docs/training.md): the sabotaged
    whole-step-graph, trained and evaluated like the committed comparison's clean one, FAILs the success gate
    (3/100 against 50/100) and the convergence check (+57.7%)."""
    h200 = REPO / "results" / "h200" / "evidence"
    sabotaged = h200 / "train-ladder-2026-12-02-sabotage" / "train-ladder.json"
    clean = h200 / "train-ladder-2026-12-02-compare-2554" / "train-ladder.json"
    assert main(["gate", str(sabotaged), "--baseline", str(clean), "--rungs", "whole-step-graph"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"whole-step-graph libero_spatial +success rate +FAIL +50\.0% \(50/100\) +3\.0% \(3/100\)", out)
    assert re.search(r"whole-step-graph +convergence +FAIL .*\+57\.7%", out)
    assert "VLABENCH_TEST_TRAIN_SABOTAGE" in out


def test_the_judgement_against_the_reference(tmp_path):
    from harness.judge.train_ladder import judge
    from harness.train.ladder import TrainBlock

    ref = _rung("community", 12, 20, [1.0] * 90 + [0.10] * 10)
    fast = copy.deepcopy(_rung("fp8", 11, 20, [1.0] * 90 + [0.104] * 10))
    fast["train"]["samples_per_s"] = 250.0
    verdicts = judge({"community": ref, "fp8": fast}, "community", TrainBlock(steps=100))["fp8"]
    assert verdicts["speedup"] == pytest.approx(2.5)
    assert verdicts["convergence"]["passed"] and verdicts["convergence"]["rel_diff"] == pytest.approx(0.04)
    assert [c["verdict"] for c in verdicts["success"]] == ["pass"]  # 55% against 60%: within 5 points
    failed = {**ref, "status": "error"}
    assert judge({"community": failed, "fp8": fast}, "community", TrainBlock(steps=100)) == {}


def test_one_seed_gives_the_figures_and_no_verdict_three_seeds_judge():
    """The table's verdicts need 3 seeds a rung (docs/gates.md): one seed's row carries the change and Fisher's
    test on its trials beside "n/a", never pass or FAIL; the same drop in each of three seeds' runs (seed_runs, as
    train-ladder --seeds 3 writes them) FAILs the success gate over seeds, and a loss 4% high passes the
    convergence over seeds. Judged by today's rules from the records, not the verdicts the result stored."""
    from harness.report.train_ladder import train_ladder_table

    ref, bad = _rung("community", 38, 40, [0.1] * 10), _rung("fp8", 20, 40, [0.104] * 10)
    ref["train"]["wall_s"], bad["train"]["wall_s"] = 300.0, 100.0
    result = _ladder_result(ref)
    stale = {"fp8": {"speedup": 9.0, "convergence": None, "success": []}}  # what an older run might have stored
    result["train_ladder"].update(rungs=[ref, bad], eval={"suites": ["libero_spatial"], "trials": 20},
                                  versus_reference=stale)  # fmt: skip
    row = next(line for line in train_ladder_table(result).splitlines() if line.startswith("fp8"))
    assert " 3.00x " in row and " 1.00x " in row  # the wall time's ratio, then samples/s's
    assert "+4.0% (n/a: 1 seed)" in row and "n/a: 1 seed, verdicts need 3; -45.0 points, Fisher one-sided p=" in row
    assert "FAIL" not in row and "pass" not in row
    seeds = []
    for seed, (k_ref, k_bad) in enumerate(((38, 20), (36, 21), (37, 19))):
        r, b = copy.deepcopy(ref), copy.deepcopy(bad)
        r["success_rate"]["libero_spatial"]["successes"], b["success_rate"]["libero_spatial"]["successes"] = (
            k_ref,
            k_bad,
        )
        seeds.append({"seed": seed, "rungs": [r, b]})
    result["train_ladder"]["seed_runs"] = seeds
    table = train_ladder_table(result)
    assert "seeds 0, 1, 2, lr" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("fp8"))
    assert row.split()[1] == "3" and "50%, 52%, 48% (mean 50.0%)" in row and "+4.0% pass (mean of 3)" in row
    assert " FAIL (mean -42.5 points over 3 seeds" in row
    result["train_ladder"]["seed_runs"] = seeds[:2]  # two seeds: the t-test's figures, no verdict
    row = next(line for line in train_ladder_table(result).splitlines() if line.startswith("fp8"))
    assert "n/a: 2 seeds, verdicts need 3; mean -41.2 points over 2 seeds" in row and "FAIL" not in row


def _scenario(tmp_path: Path, text: str, loader: str | None = None) -> str:
    path = tmp_path / "s.yaml"
    scenario = SCENARIO.read_text()
    if text.startswith("  rungs:"):  # in place of the scenario's own rungs
        scenario = re.sub(r"(?m)^  rungs: .*\n", text, scenario)
    else:
        scenario = scenario.replace("  demonstrations_from_trial: 20\n", text)
    path.write_text(
        scenario.replace("loader: {kind: memory, prepared_rows: true}", f"loader: {loader}") if loader else scenario
    )
    return str(path)


@pytest.mark.parametrize(
    ("block", "flags", "message"),
    [
        ("  rungs: [community, bogus]\n", [], "train.rungs: expected rungs of the ladder"),
        ("  demonstrations_from_trial: 5\n", [], "train.demonstrations_from_trial: expected evaluation trials (20)"),
        ("  demonstrations_from_trial: 20\n", ["--trials", "25"], "evaluation trials (25)"),
        ("  demonstrations_from_trial: 20\n  bogus: 1\n", [], "train.bogus: expected a known key"),
        ("  demonstrations_from_trial: 20\n", ["--rungs", "nope"], "--rungs: expected rung names of pi05-libero-train"),
        ("  demonstrations_from_trial: 20\n", [], "train.loader.kind: expected"),
    ],
)
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, block, flags, message):
    monkeypatch.chdir(tmp_path)
    path = _scenario(tmp_path, block, "{kind: fast}" if "loader" in message else None)
    assert ("{kind: fast}" in Path(path).read_text()) is ("loader" in message)  # the edit took
    code = main(["train-ladder", path, "--target", "cpu", "--out", str(tmp_path / "o"), *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_make_dataset_first_trial_needs_libero(tmp_path, capsys):
    argv = [
        "make-dataset",
        "--source",
        "synthetic",
        "--episodes",
        "2",
        "--first-trial",
        "3",
        "--out",
        str(tmp_path / "d"),
    ]
    assert main(argv) == 2
    assert "--first-trial: expected a non-negative state index, with --source libero" in capsys.readouterr().err


@pytest.mark.parametrize(
    "source, noise", [("synthetic", "0.2"), ("libero", "1.5"), ("libero", "0.1,0.2,0.3"), ("libero", "0.1,x")]
)
def test_make_dataset_refuses_action_noise_it_cannot_execute(tmp_path, capsys, source, noise):
    argv = [
        "make-dataset",
        "--source",
        source,
        "--episodes",
        "2",
        "--action-noise",
        noise,
        "--out",
        str(tmp_path / "d"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    expected = "--action-noise: expected a deviation from 0 to 1, or two (position,rotation), with --source libero"
    assert expected in err and repr(noise) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


def test_compare_sets_trained_rungs_side_by_side_per_target(tmp_path, capsys):
    """`vlabench compare` of two train-ladder results: per rung and target, samples/s with the speedup beside
    the success rate."""
    fast = _rung("fp8", 11, 20, [0.1] * 10)
    fast["train"]["samples_per_s"] = 250.0
    paths = []
    for target, rungs in (("h200", [_rung("community", 12, 20, [0.1] * 10), fast]), ("b200", [fast])):
        result = _ladder_result(rungs[0])
        result["target"]["name"] = target
        result["train_ladder"]["rungs"] = rungs
        result["train_ladder"]["eval"] = {"suites": ["libero_spatial"]}
        result["train_ladder"]["versus_reference"] = {"fp8": {"speedup": 2.5}} if target == "h200" else {}
        paths.append(tmp_path / f"{target}.json")
        paths[-1].write_text(json.dumps(result))
    assert main(["compare", *map(str, paths), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "community  100/s; success 60% of 20" in out
    assert "fp8        250/s (2.50x); success 55% of 20  250/s; success 55% of 20" in out
    assert (tmp_path / "cmp" / "comparison.md").exists()


@pytest.mark.slow
def test_vlabench_run_times_the_scenarios_ladder(tmp_path, monkeypatch):
    """A scenario with a train: block (and an eval: block) is a training scenario: `vlabench run` times its
    ladder like any other (an evaluation-only scenario is refused)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run.json"
    assert (
        main(["run", str(SCENARIO), "--target", "cpu", "--rungs", "community", "--repeats", "1", "--out", str(out)])
        == 0
    )
    rung = json.loads(out.read_text())["rungs"][0]
    assert rung["name"] == "community" and rung["status"] == "ok" and rung["loss_parity"]["pass"]


@pytest.mark.skipif(sim_unready() is not None, reason=str(sim_unready()))
def test_every_prompt_of_the_suite_fits_the_scenarios_text_tokens_with_the_state():
    """The prompt is truncated to the text tokens without a word (as LeRobot does), which would cut the state
    off: every libero_spatial instruction with the widest state (every bin three digits) must fit, in the
    tokenizer the scenario trains with (word pieces: 61 tokens; in bytes the longest is 145)."""
    import numpy as np

    from harness.eval import sim

    sim.prepare(None)  # LIBERO's configuration, before LIBERO is imported
    from harness.eval.env import suite_tasks
    from harness.scenario import load_scenario
    from harness.train.ladder import train_block
    from models.pi05.config import SIZES
    from models.pi05.processor import Pi05Processor
    from models.tokenizers import builtin_tokenizer

    scenario = load_scenario(str(SCENARIO))
    workload, tokenizer = scenario.workload, train_block(scenario).tokenizer
    assert tokenizer == "pieces"

    def prompts(name: str) -> list[list[int]]:
        tok = builtin_tokenizer(name, SIZES[workload.model_size].vocab)
        processor = Pi05Processor(tok, state_in_prompt=workload.robot_state, state_pad=workload.state_pad)
        widest = np.full(8, 0.99)  # normalised: bin 254
        return [processor.prompt_tokens(t.language, widest) for t in suite_tasks("libero_spatial")]

    in_bytes = prompts("bytes")
    assert workload.robot_state and "State: 254" in bytes(t - 3 for t in in_bytes[0][1:]).decode()
    longest = max(map(len, prompts(tokenizer)))
    assert longest <= workload.text_tokens < max(map(len, in_bytes)), (longest, workload.text_tokens)
    assert (longest, max(map(len, in_bytes))) == (61, 145)  # the figures docs/training.md gives
    # ...and the words that share an id at the small size's vocabulary of 512 (docs/training.md)
    pieces = builtin_tokenizer(tokenizer, SIZES[workload.model_size].vocab)
    words = sorted({w for t in suite_tasks("libero_spatial") for w in t.language.split()})
    ids = [pieces.encode(" " + w)[0] for w in words]
    shared = sorted(w for w, i in zip(words, ids) if ids.count(i) > 1)
    assert (len(words), shared) == (26, ["cabinet", "to"])


COMPARE = REPO / "results" / "h200" / "evidence" / "train-ladder-2026-12-02-compare-2554" / "train-ladder.json"


def _with_curve(tmp_path: Path, points: list[tuple[int, float]]) -> Path:
    """The committed seed-0 comparison with a success curve on its community rung: each point (step, wall_s) with
    the rung's own libero_spatial counts."""
    data = json.loads(COMPARE.read_text())
    rung = data["train_ladder"]["rungs"][0]
    entry = rung["success_rate"]["libero_spatial"]
    rung["curve"] = [{"step": s, "wall_s": w, "success_rate": {"libero_spatial": entry}} for s, w in points]
    path = tmp_path / "tl.json"
    path.write_text(json.dumps(data))
    return path


def test_a_success_curve_is_shown_and_an_impossible_one_refused(tmp_path, capsys):
    """A rung's curve is a table under the ladder's in `vlabench show`; a curve whose steps go back, or whose wall
    time shrinks, or whose counts are impossible is refused in one line naming the key (exit 2)."""
    assert main(["show", str(_with_curve(tmp_path, [(1000, 150.0), (2554, 390.0)]))]) == 0
    out = capsys.readouterr().out
    assert "success against training time (--curve-every)" in out
    assert re.search(r"community\s+1000\s+2\.5 min\s+52\.0% \[42%-62%\] \(52/100\)", out), out
    for points, key in (([(2554, 390.0), (1000, 150.0)], "curve[1].step"), ([(1000, 400.0), (2554, 390.0)], "wall_s")):
        assert main(["show", str(_with_curve(tmp_path, points))]) == 2
        assert key in capsys.readouterr().err
    data = json.loads(_with_curve(tmp_path, [(1000, 150.0)]).read_text())
    data["train_ladder"]["rungs"][0]["curve"][0]["success_rate"]["libero_spatial"] = {"successes": 5, "trials": 10}
    (tmp_path / "counts.json").write_text(json.dumps(data))
    assert main(["show", str(tmp_path / "counts.json")]) == 0  # the counts alone: the interval computed
    assert "50.0% [24%-76%] (5/10)" in capsys.readouterr().out
    data["train_ladder"]["rungs"][0]["curve"][0]["success_rate"]["libero_spatial"] = {"successes": 5, "trials": 4}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    assert main(["show", str(tmp_path / "bad.json")]) == 2
    assert "successes" in capsys.readouterr().err


def test_curve_every_must_be_fewer_steps_than_the_rungs_train(tmp_path, capsys):
    assert main(_smoke(tmp_path / "tl", "--curve-every", "4")) == 2
    assert "--curve-every: expected fewer steps than the rungs train (4), got 4" in capsys.readouterr().err
