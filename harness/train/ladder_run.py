"""Running a train-ladder (harness/train/ladder.py): per rung, train, then evaluate the last checkpoint; the
result file is rewritten after each rung with every rung's record and the judgements against the reference."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from .. import kinds
from ..data.fingerprint import dataset_fingerprint, fingerprint_difference
from ..errors import InputError
from ..eval import main as eval_main  # eval_main.run_eval, looked up when called: tests stand in for it
from ..ladder.runner import unsupported_reason, with_substitutes
from ..machine.hardware import capabilities
from ..results import ResultWriter, load_result, provenance
from . import loop  # loop.train, looked up when called: tests stand in for it
from .checkpoints import saved_checkpoints
from .ladder import (
    RESULT_FILE,
    LadderPlan,
    curve_eval_path,
    error_text,
    eval_path,
    missing_suites,
    result_path,
    rung_dir,
    tasks_of_suite,
)
from .loop import RESULT_FILE as TRAIN_FILE
from .setup import TrainPlan

# ([(seed, rung records by name)] per training seed, the reference rung's name, the train block) -> judgements per rung
Judge = Callable[[list[tuple[int, dict[str, dict]]], str, object], dict]


def _say(line: str) -> None:
    print(line, flush=True)


def train_rung(plan: LadderPlan, rung: str, command: list[str], seed: int | None = None) -> dict:
    """`vlabench train` of the rung into OUT/<rung>/ (OUT/seed-<S>/<rung>/ with --seeds), with the ladder's data,
    steps and recipe and the seed (default: the plan's first); with --resume, a finished training is taken as it
    is and a stopped one continues from its last checkpoint."""
    seed = plan.seed if seed is None else seed
    folder = rung_dir(plan, rung, seed)
    if plan.resume and (folder / TRAIN_FILE).exists():
        done = load_result(folder / TRAIN_FILE)
        if done["train"].get("steps_done", 0) >= plan.steps and done["train"].get("checkpoints"):
            _say(f"== {rung}: trained already ({folder / TRAIN_FILE}, {done['train']['steps_done']} steps)")
            return done

    tplan = TrainPlan(
        scenario=plan.scenario,
        rung=rung,
        target=plan.target,
        dataset=plan.dataset,
        steps=plan.steps,
        out=folder,
        recipe=plan.recipe,
        workers=plan.workers,
        loader=plan.block.loader,
        tokenizer=plan.block.tokenizer,
        # with a curve, every K-th step's checkpoint is kept for its evaluation; else the last one only
        checkpoint_every=plan.curve_every,
        keep=plan.steps // plan.curve_every + 1 if plan.curve_every else 1,
        seed=seed,
        resume=plan.resume and bool(saved_checkpoints(folder)),
    )
    return loop.train(tplan, command)


def evaluate_rung(
    plan: LadderPlan,
    rung: str,
    suite: str,
    checkpoint: str,
    command: list[str],
    seed: int | None = None,
    out: Path | None = None,
) -> dict:
    """`vlabench eval` of the checkpoint on one of the ladder's suites with its trials, into the rung's folder of
    the training seed (`out`, default eval_path: eval.json, or eval-<suite>.json in a ladder of several suites; the
    evaluation's own seed, its initial states, is the protocol's whatever the training's)."""
    s = plan.eval_settings
    out = out or eval_path(plan, rung, suite, seed)
    cfg = eval_main.EvalConfig(
        suites=[suite],
        tasks=tasks_of_suite(plan, suite),
        trials=s["trials"],
        policy=plan.scenario.model,
        checkpoint=checkpoint,
        workers=s["workers"],
        out=out,
        resume=plan.resume and out.exists(),  # the episodes already run are kept, the rest run
        assets=plan.assets,
        seed=s["seed"],
        device=plan.device,
        ray=plan.ray,
        scenario={"name": plan.scenario.name, "path": plan.scenario.path, "sha256": plan.scenario.sha256, "rung": rung},
        max_steps=plan.max_steps,
    )
    return eval_main.run_eval(cfg, command, progress=_say)


def _of_suite(rates: dict, suite: str) -> dict:
    """A suite's entries of a success_rate mapping: the suite's and its tasks' ("libero_spatial/3")."""
    return {key: entry for key, entry in rates.items() if key.split("/")[0] == suite}


def evaluate_suites(
    plan: LadderPlan,
    rung: str,
    checkpoint: str,
    command: list[str],
    seed: int | None,
    earlier: dict,
    out_of: Callable[[str], Path] | None = None,
) -> dict:
    """The rung's evaluation on each of the ladder's suites, one `vlabench eval` a suite (into `out_of(suite)`,
    default eval_path), so that a suite whose evaluation fails leaves the others' counts. A suite the earlier
    record (--resume) holds is kept as it was. Returns the record's evaluation keys: success_rate (the eval's, every
    suite's and task's), eval_throughput per suite, eval_errors (errored episodes, counted as failures as `vlabench
    eval` counts them) and suite_errors (the suites whose evaluation failed, with the error)."""
    rates, speed, failed = {}, {}, {}
    for suite in plan.eval_settings["suites"]:
        kept = _of_suite(earlier.get("success_rate") or {}, suite)
        if suite in kept:
            rates |= kept
            speed[suite] = (earlier.get("eval_throughput") or {}).get(suite)
            continue
        try:
            _say(f"== {rung}: evaluating {checkpoint} on {suite}")
            evaluated = evaluate_rung(plan, rung, suite, checkpoint, command, seed, out_of and out_of(suite))
        except InputError:
            raise  # bad input stops the ladder at once, in one line: every rung would meet it
        except Exception as exc:  # this suite is recorded failed; the other suites are evaluated
            failed[suite] = error_text(exc)
            _say(f"== {rung}: evaluation on {suite} failed: {failed[suite]}")
            continue
        if suite not in evaluated["success_rate"]:  # nothing ran (a stop before the first episode)
            failed[suite] = "no episode was evaluated"
            continue
        rates |= _of_suite(evaluated["success_rate"], suite)
        speed[suite] = evaluated.get("throughput")
    out = {"success_rate": rates, "eval_throughput": speed} if rates else {}
    errors = sum(rates[suite].get("errors", 0) for suite in plan.eval_settings["suites"] if suite in rates)
    if errors:
        out["eval_errors"] = errors
    return out | ({"suite_errors": failed} if failed else {})


def evaluate_curve(plan: LadderPlan, rung: str, record: dict, command: list[str], seed: int | None) -> list[dict]:
    """The rung's success curve (--curve-every): each kept checkpoint before the last evaluated on every suite as
    the last was (evaluate_suites, into curve_eval_path), then the last checkpoint's own counts, each point with its
    step and the training's wall time up to it. A suite whose evaluation of a checkpoint fails is left out of that
    point, saying so; the others are kept."""
    checkpoints = record["train"]["checkpoints"]
    points = []
    for c in checkpoints[:-1]:
        evaluated = evaluate_suites(
            plan,
            rung,
            c["path"],
            command,
            seed,
            {},
            lambda suite, step=c["step"]: curve_eval_path(plan, rung, suite, step, seed),
        )
        points.append({"step": c["step"], "wall_s": c.get("wall_s"), "success_rate": evaluated.get("success_rate")})
    last = checkpoints[-1]
    points.append({"step": last["step"], "wall_s": last.get("wall_s"), "success_rate": record["success_rate"]})
    return [{**p, "success_rate": _suites_only(p["success_rate"] or {})} for p in points]


def _suites_only(rates: dict) -> dict:
    """A success_rate mapping without its tasks' entries ("libero_spatial/3")."""
    return {key: entry for key, entry in rates.items() if "/" not in key}


def _train_summary(result: dict) -> dict:
    """What the ladder keeps of a training run: its `train` block whole (the loss curve the convergence check
    reads) without the per-step learning rates."""
    t = dict(result["train"])
    t.pop("lr", None)
    return t


def unsupported(plan: LadderPlan, rung: str) -> str | None:
    """Why the target cannot train the rung (as `vlabench run` decides, after the target's substitutes)."""
    caps = capabilities(plan.target)
    entry = next(r for r in plan.scenario.ladder if r.name == rung)
    entry, _ = with_substitutes(plan.scenario, plan.target, entry, caps)
    return unsupported_reason(plan.scenario, plan.target, entry, caps)


def run_rung(
    plan: LadderPlan, rung: str, command: list[str], seed: int | None = None, earlier: dict | None = None
) -> dict:
    """One rung's record of one training seed: trained and evaluated on each suite, or the error that stopped it
    (the ladder goes on). `earlier`: its ok record of an earlier run (--resume), whose suites are kept."""
    folder = rung_dir(plan, rung, seed)
    record = {"name": rung, "status": "ok", "dir": folder.relative_to(plan.out).as_posix()}
    if plan.seeds:
        record["seed"] = plan.seed if seed is None else seed
    reason = unsupported(plan, rung)
    if reason:
        _say(f"== {rung}: unsupported on {plan.target.name}: {reason}")
        return {**record, "status": "unsupported", "stage": "training", "error": reason}
    try:
        _say(f"\n== {rung}: training {plan.steps} steps into {folder}")
        trained = train_rung(plan, rung, command, seed)
        record["train"] = _train_summary(trained)
        record["checkpoint"] = trained["train"]["checkpoints"][-1]["path"]
    except InputError:
        raise  # bad input stops the ladder at once, in one line: every rung would meet it
    except Exception as exc:  # a crashed rung is recorded and the ladder goes on
        record.update(status="error", stage="training", error=error_text(exc))
        _say(f"== {rung}: training failed: {record['error']}")
        return record
    record |= evaluate_suites(plan, rung, record["checkpoint"], command, seed, earlier or {})
    if plan.curve_every and record.get("success_rate"):
        record["curve"] = evaluate_curve(plan, rung, record, command, seed)
    if not record.get("success_rate"):  # no suite evaluated: the rung failed in its evaluation
        failed = record["suite_errors"]
        error = (
            "; ".join(f"{suite}: {e}" for suite, e in failed.items())
            if len(failed) > 1
            else next(iter(failed.values()))
        )
        record.update(status="error", stage="evaluation", error=error)
    return record


def _header(plan: LadderPlan, command: list[str]) -> dict:
    s, t = plan.scenario, plan.target
    workload = s.workload_for(t.name).as_dict()
    return {
        "kind": "train-ladder",
        "scenario": {"name": s.name, "path": s.path, "sha256": s.sha256, "source": s.source},
        "target": {"name": t.name, "backend": t.backend},
        "provenance": {**provenance(command), "run_id": uuid.uuid4().hex[:12]},
        "workload": {
            "model": s.model,
            **workload,
            "seed": plan.seed,
            **({"seeds": list(plan.seeds)} if plan.seeds else {}),
        },
        "rungs": [],  # the rungs' records are under train_ladder: `compare` and the speed gate skip this file
    }


def _earlier(plan: LadderPlan) -> dict[int, dict[str, dict]]:
    """With --resume: the rungs of OUT/train-ladder.json per training seed (those ok are kept; the others run
    again). A ladder of other seeds, or of one seed where --seeds asks for several (or the reverse), is refused;
    --seeds may add seeds after those trained."""
    path = result_path(plan)
    if not plan.resume or not path.exists():
        return {}
    old = load_result(path)
    kinds.require(old, "train-ladder", str(path), "a train-ladder result to continue")
    if old["scenario"].get("sha256") != plan.scenario.sha256:
        raise InputError(str(path), "scenario.sha256", f"a run of {plan.scenario.path} as it is now", "another version")
    if old["workload"].get("seed", 0) != plan.seed:
        raise InputError(
            str(path), "workload.seed", f"the seed of --seed ({plan.seed})", str(old["workload"].get("seed"))
        )
    runs = old["train_ladder"].get("seed_runs")
    if bool(runs) != bool(plan.seeds):
        expected = "a ladder of --seeds (train_ladder.seed_runs)" if plan.seeds else "a ladder of one seed (no --seeds)"
        raise InputError(str(path), "train_ladder.seed_runs", expected, "the other kind")
    runs = runs or [{"seed": plan.seed, "rungs": old["train_ladder"]["rungs"]}]
    missing = [run["seed"] for run in runs if run["seed"] not in plan.training_seeds()]
    if missing:
        seeds = ", ".join(map(str, plan.training_seeds()))
        raise InputError(str(path), "workload.seeds", f"seeds among those of --seed/--seeds ({seeds})", str(missing))
    _check_same_dataset(plan, path, runs)
    return {run["seed"]: {r["name"]: r for r in run["rungs"]} for run in runs}


def _check_same_dataset(plan: LadderPlan, path, runs: list[dict]) -> None:
    """A ladder continued on data other than its trained rungs read (the dataset made again at the same path, as a
    device machine's session does) would judge rungs of other data against each other: refused in one line."""
    current = dataset_fingerprint(plan.dataset)
    for run in runs:
        for record in run["rungs"]:
            recorded = ((record.get("train") or {}).get("data") or {}).get("data") or {}
            differ = fingerprint_difference(recorded.get("content"), current)
            if differ:
                raise InputError(
                    str(path), f"seed {run['seed']}, rung {record.get('name')}: train.data.data.content",
                    f"the dataset at {plan.dataset} as that rung trained on it (sha256 {recorded['content']['sha256'][:12]})",
                    f"sha256 {current['sha256'][:12]}, which differs in {differ}: train the ladder again in a new folder",
                )  # fmt: skip


def _ladder_block(plan: LadderPlan, runs: dict[int, dict[str, dict]], judge: Judge) -> dict:
    """The result's train_ladder: `rungs` holds the first seed's records (what tools that read one run read),
    `seed_runs` every seed's with --seeds; the judgements over every seed trained so far."""
    first = runs.get(plan.seed, {})
    block = {
        "reference": plan.reference,
        "steps": plan.steps,
        "dataset": plan.dataset,
        "recipe": plan.recipe.as_dict(),
        "eval": plan.eval_settings,
        "convergence_tolerance": plan.block.convergence_tolerance,
        "success_tolerance": plan.block.success_tolerance,
        "rungs": list(first.values()),
    }
    if plan.seeds:
        block["seed_runs"] = [{"seed": seed, "rungs": list(runs[seed].values())} for seed in plan.seeds if seed in runs]
    judged = [(seed, runs[seed]) for seed in plan.training_seeds() if runs.get(seed)]
    block["versus_reference"] = judge(judged, plan.reference, plan.block)  # judged by the caller's rules
    return block


def run_train_ladder(plan: LadderPlan, command: list[str], judge: Judge) -> dict:
    """Train and evaluate every rung of the plan in turn, seed after seed (so that a stopped ladder holds whole
    seeds); returns the result (also in OUT/train-ladder.json). `judge(runs, reference, block)` sets the rungs
    against the reference (harness/judge/train_ladder.py, judge_runs)."""
    runs = _earlier(plan)
    header = _header(plan, command)
    if runs:
        header["provenance_earlier"] = [load_result(result_path(plan))["provenance"]]
    writer = ResultWriter(result_path(plan), {**header, "train_ladder": _ladder_block(plan, runs, judge)})
    start, seeds = time.perf_counter(), plan.training_seeds()
    for seed in seeds:
        records = runs.setdefault(seed, {})
        of_seed = f" (seed {seed}, {seeds.index(seed) + 1} of {len(seeds)})" if plan.seeds else ""
        for i, rung in enumerate(plan.rungs, 1):
            ok = records.get(rung) if records.get(rung, {}).get("status") == "ok" else None
            if ok and not missing_suites(plan, ok):
                _say(f"\n[{i}/{len(plan.rungs)}] {rung}{of_seed}: done already")
                continue
            _say(f"\n[{i}/{len(plan.rungs)}] {rung}{of_seed} ({(time.perf_counter() - start) / 60:.1f} min so far)")
            records[rung] = run_rung(plan, rung, command, seed, earlier=ok)  # an ok rung: its missing suites
            writer.update({"train_ladder": _ladder_block(plan, runs, judge)})
    return writer.data


__all__ = ["RESULT_FILE", "run_train_ladder"]
