"""`vlabench train`: one rung of a scenario trained for N steps on a dataset with openpi's recipe, checkpointed
as an evaluable policy, with a result file (kind "train") that `vlabench show` prints.

Each step: the flow draws of the step seeded as in the ladder, the learning rate of the schedule set, the batch
fetched (inside the step, as in the ladder's dataset rungs), the family's step (loss, backward, clipping at 1.0,
AdamW), the EMA updated, the loss read (which waits for the device: the step's time is complete).
"""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path

import torch

from models import get_family

from .. import kinds
from ..errors import InputError
from ..ladder.rung import seed_step
from ..machine.gpu_state import GpuStateSampler, nvml_readers
from ..results import ResultWriter, load_result, provenance
from ..scenario import Workload
from ..spec import RungSpec
from .checkpoints import (
    check_same_run,
    load_latest,
    optimizer_tensors,
    restore_optimizer,
    save_checkpoint,
    saved_checkpoints,
)
from .convergence import smoothed_loss, window_for
from .recipe import lr_at, set_lr
from .setup import Training, TrainPlan, build_training, train_spec

WARMUP_EXCLUDED = 5  # first steps of each run (compilation, allocator warm-up): left out of samples/s
RESULT_FILE = "train.json"


def check_out(plan: TrainPlan) -> None:
    """An existing training run in --out is continued only with --resume, never replaced."""
    out = Path(plan.out)
    if out.exists() and not out.is_dir():
        raise InputError(str(out), "--out", "a folder for checkpoints and train.json", "an existing file")
    existing = (out / RESULT_FILE).exists() or bool(saved_checkpoints(out))
    if existing and not plan.resume:
        raise InputError(str(out), "--out", "a new folder (or --resume to continue the run in it)", "a training run")
    if plan.resume and not existing:
        raise InputError(str(out), "--resume", "a folder holding a training run to continue", "none")


def run_identity(plan: TrainPlan, spec: RungSpec) -> dict:
    """What makes two runs the same run (a resumed run must match it)."""
    s = plan.scenario
    return {
        "scenario": {"name": s.name, "sha256": s.sha256},
        "rung": plan.rung,
        "grad_accum": plan.grad_accum,
        "options": spec.options,
        "loader": spec.loader,
        "workload": spec.workload_record(),
        "recipe": plan.recipe.as_dict(),
        "init": plan.init,
    }


def initial_weights(plan: TrainPlan, training_family, workload: Workload, saved) -> dict | None:
    """Plain-named weights to start from: a resumed run's trained weights, --init's checkpoint, or None."""
    if saved is not None:
        raw = {k[len("weights/") :]: v for k, v in saved.tensors.items() if k.startswith("weights/")}
        return raw or training_family.read_weights(str(saved.folder))[0]
    if plan.init == "random":
        return None
    try:
        weights, size = training_family.read_weights(plan.init)
    except ValueError as e:
        raise InputError("--init", None, "a checkpoint in a layout the family reads", str(e).splitlines()[0]) from None
    if size != workload.model_size:
        raise InputError("--init", None, f"a {workload.model_size} checkpoint (the run's model size)", size)
    return weights


def restore(training: Training, saved) -> None:
    """The optimizer state and the EMA of a checkpoint, into a training built from its weights."""
    where = str(saved.folder / "train_state.safetensors")
    restore_optimizer(training.optimizer, training.param_names, saved.tensors, where)
    if training.ema is not None:
        ema, _ = training.family.read_weights(str(saved.folder))
        training.ema.load(training.family.import_weights(training.built.model, ema))


def save(training: Training, plan: TrainPlan, spec: RungSpec, identity: dict, step: int, losses: list) -> Path:
    """Checkpoint `step`: the policy (EMA weights if kept) and the state --resume needs."""
    family, model = training.family, training.built.model
    workload = spec.workload
    trained = {k: v.detach().cpu() for k, v in family.export_weights(model).items()}
    policy = trained
    if training.ema is not None:
        policy = {k: v.cpu() for k, v in family.export_weights(model, training.ema.tensors()).items()}
    tensors = optimizer_tensors(training.optimizer, training.param_names)
    if training.ema is not None:
        tensors.update({f"weights/{k}": v.contiguous() for k, v in trained.items()})
    extra = {"scenario": plan.scenario.name, "rung": plan.rung, "step": step, "ema": training.ema is not None}
    # the demonstrations' discrete action values (a scripted gripper's -1, 0, 1): the policy snaps its outputs there
    discrete = training.feed.dataset.discrete_action_values()
    if discrete:
        extra["action_values"] = {str(dim): values for dim, values in discrete.items()}

    def write_policy(folder: Path) -> None:
        family.save_policy(
            folder,
            policy,
            workload.model_size,
            workload,
            training.feed.dataset.stats or {},
            workload.data.tokenizer,
            extra,
        )

    meta = {"run": identity, "smoothed_loss": smoothed_loss(losses)}
    return save_checkpoint(plan.out, step, write_policy, tensors, meta, plan.keep)


def throughput(step_times: list[float], parts: list[dict], batch: int) -> dict:
    """samples/s: the median over steps, each run's first steps left out; and over the wall time."""
    timed = [
        t
        for part in parts
        for t in step_times[part["start_step"] + WARMUP_EXCLUDED : part["end_step"]]
        if part["end_step"] - part["start_step"] > WARMUP_EXCLUDED
    ] or step_times
    wall = sum(part["wall_s"] for part in parts)
    return {
        "samples_per_s": statistics.median(batch / t for t in timed) if timed else None,
        "samples_per_s_wall": batch * len(step_times) / wall if wall else None,
        "wall_s": wall,
        "steps_timed": len(timed),
    }


def result_header(plan: TrainPlan, spec: RungSpec, training: Training, command: list[str]) -> dict:
    s, t, device = plan.scenario, plan.target, training.device
    return {
        "kind": "train",
        "scenario": {"name": s.name, "path": s.path, "sha256": s.sha256, "source": s.source},
        "target": {
            "name": t.name,
            "backend": t.backend,
            "device_name": device.device_name(),
            "device_count": device.device_count(),
            "listed_in_scenario": s.lists_target(t.name),
        },
        "provenance": {**provenance(command), "run_id": uuid.uuid4().hex[:12]},
        "workload": spec.workload_record(),
        "rungs": [],  # not a ladder: compare and the gates skip this file; `vlabench show` prints its table
    }


def earlier_run(plan: TrainPlan, start: int) -> tuple[dict, list]:
    """The record of the run a --resume continues (its curve cut at the checkpoint) and its provenances."""
    path = Path(plan.out) / RESULT_FILE
    if not path.exists():
        return {}, []
    old = load_result(path)
    kinds.require(old, "train", str(path), "a train result to continue")
    record = dict(old.get("train") or {})
    for key in ("losses", "step_times_s", "lr"):
        record[key] = list(record.get(key) or [])[:start]
    record["checkpoints"] = [c for c in record.get("checkpoints", []) if c["step"] <= start]
    record["parts"] = [p for p in record.get("parts", []) if p["start_step"] < start]
    for part in record["parts"]:
        part["end_step"] = min(part["end_step"], start)
    return record, [old["provenance"], *old.get("provenance_earlier", [])]


def train_record(plan: TrainPlan, spec: RungSpec, substituted: dict, training: Training, earlier: dict) -> dict:
    """The run's record before its first step: what trains, on what, how; the curves come as it goes."""
    family, workload = training.family, spec.workload
    params = sum(p.numel() for p in training.built.model.parameters())
    return {
        "rung": plan.rung,
        "options": spec.options,
        "loader": spec.loader,
        **({"substituted": substituted} if substituted else {}),
        "model_size": workload.model_size,
        "parameters": params,
        "trainable_parameters": sum(p.numel() for p in training.built.model.parameters() if p.requires_grad),
        "flops_per_sample": family.flops_per_sample(workload.model_size, workload),
        "applied": training.built.applied.as_dict(),
        "recipe": plan.recipe.as_dict(),
        "recipe_changed": plan.recipe.changed(),
        "init": plan.init,
        "data": training.feed.describe(),
        "steps_planned": plan.steps,
        "batch_per_step": spec.batches().per_step,
        "grad_accum": plan.grad_accum,
        "losses": earlier.get("losses", []),
        "step_times_s": earlier.get("step_times_s", []),
        "lr": earlier.get("lr", []),
        "parts": earlier.get("parts", []),
        "checkpoints": earlier.get("checkpoints", []),
        **({"test_train_sabotage": training.sabotage} if training.sabotage else {}),
    }


def summarize(record: dict, batch: int) -> dict:
    """The record with its summary figures (steps done, smoothed final loss, samples/s, wall time) updated."""
    losses = record["losses"]
    window = window_for(len(losses)) if losses else 0
    return {
        **record,
        "steps_done": len(losses),
        "smoothing_window": window,
        "final_loss": smoothed_loss(losses, window) if losses else None,
        **throughput(record["step_times_s"], record["parts"], batch),
    }


def progress_line(step: int, steps: int, record: dict, batch: int, every: int, wait_ms: float) -> str:
    losses, times = record["losses"][-every:], record["step_times_s"][-every:]
    mean = statistics.fmean(x for x in losses if x is not None) if any(x is not None for x in losses) else float("nan")
    rate = batch * len(times) / sum(times)
    left = (steps - step) * sum(times) / len(times)
    return (
        f"step {step}/{steps}  loss {record['losses'][-1] if record['losses'][-1] is not None else float('nan'):.4f}"
        f" (mean of last {len(losses)}: {mean:.4f})  lr {record['lr'][-1]:.2e}  {rate:.1f} samples/s"
        f"  data wait {wait_ms:.0f} ms  eta {left / 60:.1f} min"
    )


def run_steps(training: Training, plan: TrainPlan, spec: RungSpec, identity: dict, record: dict, writer) -> None:
    """The training loop from the record's step to plan.steps, with progress lines and checkpoints; the GPU's
    clocks, power and temperature are sampled beside the steps (the part's `gpu_state`)."""
    start = len(record["losses"])
    part = {"start_step": start, "end_step": start, "wall_s": 0.0, "run_id": writer.data["provenance"]["run_id"]}
    record["parts"].append(part)
    sampler = GpuStateSampler(gpu_readers(training.device)).start()
    try:
        _step_loop(training, plan, spec, identity, record, writer, part, sampler)
    finally:
        part["gpu_state"] = sampler.stop()
    writer.update({"train": summarize(record, spec.batches().per_step)})


def gpu_readers(device) -> dict | None:
    """NVML readers of the training's CUDA device, or None (a CPU, or another accelerator)."""
    if device.torch_device.type != "cuda":
        return None
    index = device.torch_device.index
    return nvml_readers(index if index is not None else torch.cuda.current_device())


def _step_loop(
    training: Training,
    plan: TrainPlan,
    spec: RungSpec,
    identity: dict,
    record: dict,
    writer,
    part: dict,
    sampler: GpuStateSampler,
) -> None:
    batch, seed = spec.batches().per_step, spec.workload.seed
    every = plan.log_every or max(1, min(100, plan.steps // 20))
    began, waits = time.perf_counter(), []
    for step in range(part["start_step"], plan.steps):
        sampler.step = step
        seed_step(seed, step)  # draws inside the step repeat across rungs and resumed runs
        lr = lr_at(plan.recipe, step)
        set_lr(training.optimizer, lr)
        t0 = time.perf_counter()
        batch_data, wait = training.fetch(step)
        loss = training.step(batch_data)
        if training.ema is not None:
            training.ema.update()
        value = loss.item()  # waits for the device
        record["step_times_s"].append(time.perf_counter() - t0)
        record["losses"].append(value if value == value and abs(value) != float("inf") else None)
        record["lr"].append(lr)
        waits.append(wait)
        part.update(end_step=step + 1, wall_s=time.perf_counter() - began)
        done = step + 1
        if done % every == 0 or done == plan.steps:
            line = progress_line(done, plan.steps, record, batch, every, 1000 * statistics.median(waits))
            clock = sampler.latest("sm_clock_mhz")
            print_progress(line if clock is None else f"{line}  sm clock {clock:.0f} MHz")
            waits = []
        if done == plan.steps or (plan.checkpoint_every and done % plan.checkpoint_every == 0):
            folder = save(training, plan, spec, identity, done, record["losses"])
            # the training's wall time up to this checkpoint (every part's loop, saves included): a success curve's x
            wall = sum(p["wall_s"] for p in record["parts"])
            record["checkpoints"].append({"step": done, "path": str(folder), "wall_s": wall})
            writer.update({"train": summarize(record, batch)})
            print_progress(f"checkpoint {folder}")


def print_progress(line: str) -> None:
    print(line, flush=True)


def train(plan: TrainPlan, command: list[str]) -> dict:
    """Train the plan's rung to plan.steps (continuing the last checkpoint with --resume); returns the result."""
    check_out(plan)
    spec, substituted = train_spec(plan)
    identity = run_identity(plan, spec)
    saved = load_latest(plan.out) if plan.resume else None
    if saved is not None:
        check_same_run(saved.meta.get("run", {}), identity, str(saved.folder / "train_state.json"))
    start = saved.step if saved else 0
    if start >= plan.steps:
        raise InputError("--steps", None, f"more than the {start} steps already trained", str(plan.steps))

    family = get_family(spec.model)
    weights = initial_weights(plan, family, spec.workload, saved)
    t0 = time.perf_counter()
    training = build_training(spec, plan.recipe, start, weights)
    if saved is not None:
        restore(training, saved)
        print_progress(f"resumed from {saved.folder} at step {start}")
    earlier, provenances = earlier_run(plan, start) if saved else ({}, [])
    header = result_header(plan, spec, training, command)
    if provenances:
        header["provenance_earlier"] = provenances
    record = train_record(plan, spec, substituted, training, earlier)
    writer = ResultWriter(
        Path(plan.out) / RESULT_FILE,
        {**header, "train": summarize(record, spec.batches().per_step)},
    )
    print_progress(describe_start(plan, spec, record, time.perf_counter() - t0))
    try:
        run_steps(training, plan, spec, identity, record, writer)
    except KeyboardInterrupt:
        writer.update({"train": summarize(record, spec.batches().per_step)})
        raise
    finally:
        training.feed.close()
    return writer.data


def describe_start(plan: TrainPlan, spec: RungSpec, record: dict, built_s: float) -> str:
    w = spec.workload
    sab = f"; TEST SABOTAGE {record['test_train_sabotage']['mode']}" if record.get("test_train_sabotage") else ""
    return (
        f"training {plan.scenario.name}/{plan.rung} on {plan.target.name}: {w.model_size} model "
        f"({record['parameters'] / 1e6:.1f}M parameters), batch {record['batch_per_step']}"
        + (f" ({plan.grad_accum} micro-batches of {spec.batches().micro})" if plan.grad_accum > 1 else "")
        + f", {w.dtype}, steps "
        f"{len(record['losses'])} -> {plan.steps}, peak lr {plan.recipe.peak_lr:g} after {plan.recipe.warmup_steps} "
        f"warm-up steps, EMA {plan.recipe.ema_decay or 'off'}; built in {built_s:.1f}s{sab}"
    )
