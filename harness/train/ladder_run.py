"""Running a train-ladder (harness/train/ladder.py): per rung, train, then evaluate the last checkpoint; the
result file is rewritten after each rung with every rung's record and the judgements against the reference."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from ..errors import InputError
from ..results import ResultWriter, load_result, provenance
from .ladder import RESULT_FILE, LadderPlan, error_text, result_path, rung_dir

# (rung records by name, the reference rung's name, the train block) -> judgements per rung
Judge = Callable[[dict[str, dict], str, object], dict]


def _say(line: str) -> None:
    print(line, flush=True)


def train_rung(plan: LadderPlan, rung: str, command: list[str]) -> dict:
    """`vlabench train` of the rung into OUT/<rung>/, with the ladder's data, steps and recipe; with --resume, a
    finished training is taken as it is and a stopped one continues from its last checkpoint."""
    from .checkpoints import saved_checkpoints
    from .loop import RESULT_FILE as TRAIN_FILE
    from .loop import train
    from .setup import TrainPlan

    folder = rung_dir(plan, rung)
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
        keep=1,
        seed=plan.seed,
        resume=plan.resume and bool(saved_checkpoints(folder)),
    )
    return train(tplan, command)


def evaluate_rung(plan: LadderPlan, rung: str, checkpoint: str, command: list[str]) -> dict:
    """`vlabench eval` of the checkpoint with the ladder's suites and trials, into OUT/<rung>/eval.json."""
    from ..eval.main import EvalConfig, run_eval

    s = plan.eval_settings
    out = rung_dir(plan, rung) / "eval.json"
    cfg = EvalConfig(
        suites=s["suites"],
        tasks=s.get("tasks"),
        trials=s["trials"],
        policy=plan.scenario.model,
        checkpoint=checkpoint,
        workers=s["workers"],
        out=out,
        resume=plan.resume and out.exists(),  # the episodes already run are kept, the rest run
        assets=plan.assets,
        seed=s["seed"],
        device=plan.device,
        scenario={"name": plan.scenario.name, "path": plan.scenario.path, "sha256": plan.scenario.sha256, "rung": rung},
        max_steps=plan.max_steps,
    )
    return run_eval(cfg, command, progress=_say)


def _train_summary(result: dict) -> dict:
    """What the ladder keeps of a training run: its `train` block whole (the loss curve the convergence check
    reads) without the per-step learning rates."""
    t = dict(result["train"])
    t.pop("lr", None)
    return t


def unsupported(plan: LadderPlan, rung: str) -> str | None:
    """Why the target cannot train the rung (as `vlabench run` decides, after the target's substitutes)."""
    from ..ladder.runner import unsupported_reason, with_substitutes
    from ..machine.hardware import capabilities

    caps = capabilities(plan.target)
    entry = next(r for r in plan.scenario.ladder if r.name == rung)
    entry, _ = with_substitutes(plan.scenario, plan.target, entry, caps)
    return unsupported_reason(plan.scenario, plan.target, entry, caps)


def run_rung(plan: LadderPlan, rung: str, command: list[str]) -> dict:
    """One rung's record: trained, evaluated, or the error that stopped it (the ladder goes on)."""
    record = {"name": rung, "status": "ok", "dir": rung_dir(plan, rung).name}
    reason = unsupported(plan, rung)
    if reason:
        _say(f"== {rung}: unsupported on {plan.target.name}: {reason}")
        return {**record, "status": "unsupported", "stage": "training", "error": reason}
    stage = "training"
    try:
        _say(f"\n== {rung}: training {plan.steps} steps into {rung_dir(plan, rung)}")
        trained = train_rung(plan, rung, command)
        record["train"] = _train_summary(trained)
        checkpoint = trained["train"]["checkpoints"][-1]["path"]
        record["checkpoint"] = checkpoint
        stage = "evaluation"
        _say(f"== {rung}: evaluating {checkpoint}")
        evaluated = evaluate_rung(plan, rung, checkpoint, command)
        record["success_rate"] = evaluated["success_rate"]
        record["eval_throughput"] = evaluated.get("throughput")
        errors = sum(e.get("status") == "error" for e in evaluated.get("episodes", []))
        if errors:
            record["eval_errors"] = errors  # counted as failures, as `vlabench eval` counts them
    except InputError:
        raise  # bad input stops the ladder at once, in one line: every rung would meet it
    except Exception as exc:  # a crashed rung is recorded and the ladder goes on
        record.update(status="error", stage=stage, error=error_text(exc))
        _say(f"== {rung}: {stage} failed: {record['error']}")
    return record


def _header(plan: LadderPlan, command: list[str]) -> dict:
    s, t = plan.scenario, plan.target
    workload = s.workload_for(t.name).as_dict()
    return {
        "kind": "train-ladder",
        "scenario": {"name": s.name, "path": s.path, "sha256": s.sha256, "source": s.source},
        "target": {"name": t.name, "backend": t.backend},
        "provenance": {**provenance(command), "run_id": uuid.uuid4().hex[:12]},
        "workload": {"model": s.model, **workload, "seed": plan.seed},
        "rungs": [],  # the rungs' records are under train_ladder: `compare` and the speed gate skip this file
    }


def _earlier(plan: LadderPlan) -> dict[str, dict]:
    """With --resume: the rungs of OUT/train-ladder.json (those ok are kept; the others run again)."""
    path = result_path(plan)
    if not plan.resume or not path.exists():
        return {}
    old = load_result(path)
    if old.get("kind") != "train-ladder":
        raise InputError(str(path), "kind", "a train-ladder result to continue", repr(old.get("kind")))
    if old["scenario"].get("sha256") != plan.scenario.sha256:
        raise InputError(str(path), "scenario.sha256", f"a run of {plan.scenario.path} as it is now", "another version")
    if old["workload"].get("seed", 0) != plan.seed:
        raise InputError(
            str(path), "workload.seed", f"the seed of --seed ({plan.seed})", str(old["workload"].get("seed"))
        )
    return {r["name"]: r for r in old["train_ladder"]["rungs"]}


def _ladder_block(plan: LadderPlan, records: dict[str, dict], judge: Judge) -> dict:
    return {
        "reference": plan.reference,
        "steps": plan.steps,
        "dataset": plan.dataset,
        "recipe": plan.recipe.as_dict(),
        "eval": plan.eval_settings,
        "convergence_tolerance": plan.block.convergence_tolerance,
        "success_tolerance": plan.block.success_tolerance,
        "rungs": list(records.values()),
        "versus_reference": judge(records, plan.reference, plan.block),  # judged by the caller's rules
    }


def run_train_ladder(plan: LadderPlan, command: list[str], judge: Judge) -> dict:
    """Train and evaluate every rung of the plan in turn; returns the result (also in OUT/train-ladder.json).
    `judge(records, reference, block)` sets the rungs against the reference (harness/judge/train_ladder.py)."""
    records = _earlier(plan)
    header = _header(plan, command)
    if records:
        header["provenance_earlier"] = [load_result(result_path(plan))["provenance"]]
    writer = ResultWriter(result_path(plan), {**header, "train_ladder": _ladder_block(plan, records, judge)})
    start = time.perf_counter()
    for i, rung in enumerate(plan.rungs, 1):
        if records.get(rung, {}).get("status") == "ok":
            _say(f"\n[{i}/{len(plan.rungs)}] {rung}: done already")
            continue
        _say(f"\n[{i}/{len(plan.rungs)}] {rung} ({(time.perf_counter() - start) / 60:.1f} min so far)")
        records[rung] = run_rung(plan, rung, command)
        writer.update({"train_ladder": _ladder_block(plan, records, judge)})
    return writer.data


__all__ = ["RESULT_FILE", "run_train_ladder"]
