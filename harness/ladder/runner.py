"""Plans a ladder for one target and runs each rung in its own subprocess (harness/ladder/rung.py).

A rung that crashes, runs out of memory or times out is recorded with its status and reason and the
ladder goes on. The result file is rewritten atomically after every rung.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from models import get_family

from ..data.errors import DatasetError
from ..data.make import make_missing
from ..data.pipeline import feed_kind
from ..errors import InputError
from ..machine.hardware import ALLOCATOR_ENV, Target, capabilities, get_device
from ..results import ResultWriter, load_result, provenance
from ..scenario import Scenario, Workload
from ..spec import RungSpec, scenario_spec
from ..stats.parity import loss_parity
from ..stats.repeats import combine, rotated
from .memory_plan import MemoryPlanner, memory_line
from .processes import run_group

BASELINE_FIELDS = ("samples_per_s", "peak_memory_gib")


def unsupported_reason(scenario: Scenario, target: Target, rung, caps: frozenset) -> str | None:
    """Why the target cannot train the rung: the model family's answer for the rung's options (the one place that
    knows what an option needs), else a capability the rung's own `requires` names and the target lacks (for a
    need its options cannot state, e.g. several processes for a rung whose option later rungs inherit)."""
    family = get_family(scenario.model)
    reason = family.unsupported_reason(family.parse_options(rung.cumulative), target.backend, caps)
    missing = [r for r in rung.requires if r not in caps]
    if reason or not missing:
        return reason
    return f"target {target.name} lacks {', '.join(missing)} (has: {', '.join(sorted(caps)) or 'none'})"


def with_substitutes(scenario: Scenario, target: Target, rung, caps: frozenset):
    """The rung with the target's substitute options applied, if it inherits an option the target cannot
    train with and the substitutes make it trainable; returns (rung, {option: "old -> new"})."""
    subs = scenario.substitutes.get(target.name) or {}
    if not subs or unsupported_reason(scenario, target, rung, caps) is None:
        return rung, {}
    # The rung that introduces the option is its measurement: nothing may stand in for it. The first rung is the
    # baseline, not an optimization: it may take a stand-in like the rungs after it.
    if rung.name != scenario.ladder[0].name and any(k in rung.options for k in subs):
        return rung, {}
    subs = {k: v for k, v in subs.items() if k in rung.cumulative}  # an option the rung never set keeps its default
    cumulative = {**rung.cumulative, **subs}
    changed = {k: f"{rung.cumulative[k]} -> {v}" for k, v in subs.items() if rung.cumulative[k] != v}
    swapped = dataclasses.replace(rung, cumulative=cumulative)
    if not changed or unsupported_reason(scenario, target, swapped, caps) is not None:
        return rung, {}
    return swapped, changed


def rung_command(spec_path: Path, out_path: Path, nproc: int = 1, torchrun_args: list[str] | None = None) -> list[str]:
    """The rung process: plain Python, or torchrun with `nproc` processes per node (multi-node flags such
    as --nnodes/--node_rank/--rdzv_endpoint pass through; without them the run is single-node standalone)."""
    rung = ["-m", "harness.ladder.rung", str(spec_path), str(out_path)]
    if nproc <= 1 and not torchrun_args:
        return [sys.executable, *rung]
    extra = list(torchrun_args or [])
    if not any(a.startswith(("--nnodes", "--rdzv", "--master", "--node")) for a in extra):
        extra.insert(0, "--standalone")
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *extra, *rung]


def run_rung_process(
    spec: RungSpec,
    progress: Callable[[str], None],
    timeout_s: float | None,
    env: dict | None = None,
    nproc: int = 1,
    torchrun_args: list[str] | None = None,
) -> dict:
    """Run one rung in a fresh Python process (or torchrun's process group); a crash becomes an `error`
    record with the output tail, and at `timeout_s` the whole process group is ended (see processes.py)."""
    with tempfile.TemporaryDirectory(prefix="vlabench-rung-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "rung.json")
        spec_path.write_text(json.dumps(spec.to_dict()))
        cmd = rung_command(spec_path, out_path, nproc, torchrun_args)
        child_env = {**os.environ, **ALLOCATOR_ENV.get(spec.backend, {}), **(env or {}), "PYTHONUNBUFFERED": "1"}
        # The rung must import the same harness and models as this process, installed or not.
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]), child_env.get("PYTHONPATH")) if p
        )
        done = run_group(cmd, child_env, lambda line: progress("    " + line), timeout_s)
        if done.timed_out:
            return {
                "status": "error",
                "reason": f"timed out after {timeout_s:g}s (every process of the rung ended)",
                "output_tail": done.tail,
            }
        if out_path.exists():
            return json.loads(out_path.read_text())
        return {
            "status": "error",
            "reason": f"rung process died with exit code {done.returncode}",
            "output_tail": done.tail,
        }


def add_comparisons(rungs: list[dict], family, scenario: Scenario, workload: Workload) -> None:
    """Speedups vs the baseline and the previous ok rung, and loss parity vs the baseline (in place). Parity
    needs the same batches: a rung on synthetic batches is not compared with one reading the dataset."""
    by_name = {r["name"]: r for r in rungs}
    base = by_name.get(scenario.ladder[0].name)
    base_ok = base is not None and base["status"] == "ok"
    # Loss parity is judged against the scenario's parity baseline (default: the first rung), e.g. the
    # first rung whose random draws inside the step are the same as the later rungs'.
    parity_rung = next(r for r in scenario.ladder if r.name == (scenario.parity_baseline or scenario.ladder[0].name))
    parity = by_name.get(parity_rung.name)
    parity_ok = parity is not None and parity["status"] == "ok"
    parity_opts = family.parse_options(parity_rung.cumulative)
    prev = None
    for rung in scenario.ladder:
        rec = by_name.get(rung.name)
        if rec is None or rec["status"] != "ok":
            continue
        rec["speedup_vs_baseline"] = rec["samples_per_s"] / base["samples_per_s"] if base_ok else None
        rec["speedup_vs_previous"] = rec["samples_per_s"] / prev["samples_per_s"] if prev else None
        prev = rec
        if (feed_kind(workload.data, rung.loader_cumulative) == "synthetic") != (
            feed_kind(workload.data, parity_rung.loader_cumulative) == "synthetic"
        ):
            rec["loss_parity"] = None
            rec["loss_parity_note"] = f"trains on other batches than {parity_rung.name} (synthetic vs the dataset)"
            continue
        tol, why = family.parity_tolerance(parity_opts, family.parse_options(rung.cumulative), workload.dtype)
        rec["loss_parity"] = loss_parity(rec["losses"], parity["losses"], tol, why) if parity_ok else None
        if rec["loss_parity"] is not None:
            rec["loss_parity"]["against"] = parity_rung.name


def measure_floor_process(spec: RungSpec, progress: Callable[[str], None], timeout_s: float | None) -> dict:
    """The kernel floor of the spec's workload (harness/ladder/floor.py), measured in a process of its own; a failure is
    recorded."""
    with tempfile.TemporaryDirectory(prefix="vlabench-floor-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "floor.json")
        spec_path.write_text(json.dumps(spec.to_dict()))
        root = str(Path(__file__).resolve().parents[2])
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
        }
        cmd = [sys.executable, "-m", "harness.ladder.floor", str(spec_path), str(out_path)]
        done = run_group(cmd, env, lambda line: progress("    " + line), timeout_s)
        if out_path.exists():
            return json.loads(out_path.read_text())
        why = "timed out" if done.timed_out else f"exit code {done.returncode}"
        return {"error": f"the floor measurement failed ({why})", "output_tail": done.tail}


def check_dataset(
    scenario: Scenario, workload: Workload, selected: list[str], progress: Callable[[str], None] = print
) -> None:
    """A ladder that reads a dataset fails at once, in one line, when the dataset is missing or broken,
    instead of once per rung; a missing one whose `data.make` says how is made first."""
    data = workload.data
    if all(feed_kind(data, r.loader_cumulative) == "synthetic" for r in scenario.ladder if r.name in selected):
        return
    from ..data.dataset import preflight  # here: the reader imports pyarrow and PyAV (0.1 s)

    if data == "synthetic":
        raise InputError(
            scenario.path,
            "workload.data",
            "a dataset ({dataset: PATH}) for rungs whose loader reads one",
            "data: synthetic",
        )
    path = Path(data.dataset)
    make_missing(data, progress)
    if not path.exists():
        raise DatasetError(
            path,
            None,
            "a LeRobotDataset v3.0 folder (make one: vlabench make-dataset --source "
            f"synthetic --episodes 20 --out {path}; or run with --dataset PATH)",
            "no such folder",
        )
    preflight(path)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What one `vlabench run` measures, beside the scenario and target."""

    command: list[str]
    rung_names: list[str] | None = None
    append: bool = False
    rung_timeout_s: float | None = None
    env: dict | None = None
    header_extra: dict | None = None
    nproc: int = 1
    torchrun_args: list[str] | None = None
    floor: bool = False
    repeats: int = 1  # fresh processes per rung, in rounds with the rung order rotated
    commit: str | None = None  # `--commit SHA`: the commit this code is, as the caller says (results.provenance)


def run_scenario(
    scenario: Scenario,
    target: Target,
    out_path: str | Path,
    command: list[str],
    rung_names: list[str] | None = None,
    append: bool = False,
    progress: Callable[[str], None] = print,
    rung_timeout_s: float | None = None,
    env: dict | None = None,
    header_extra: dict | None = None,
    nproc: int = 1,
    torchrun_args: list[str] | None = None,
    floor: bool = False,
    repeats: int = 1,
    commit: str | None = None,
) -> dict:
    """Run the ladder (or the named rungs) on `target`; returns the result as written to `out_path`. With `floor`,
    the workload's kernel floor is measured first and kept in the result; with `repeats` > 1 every rung runs
    that many times, each in a fresh process, round after round with the rung order rotated (harness/stats/repeats.py)."""
    plan = RunPlan(
        command, rung_names, append, rung_timeout_s, env, header_extra, nproc, torchrun_args, floor, repeats, commit
    )
    return _Run(scenario, target, Path(out_path), plan, progress).run()


def result_header(scenario: Scenario, target: Target, workload: dict, caps: frozenset, plan: RunPlan) -> dict:
    """The result file's header; `workload` the `workload` block (RungSpec.workload_record)."""
    device = get_device(target.backend, target_name=target.name)
    return {
        "scenario": {
            "name": scenario.name,
            "path": scenario.path,
            "sha256": scenario.sha256,
            "source": scenario.source,
        },
        "target": {
            "name": target.name,
            "backend": target.backend,
            "device_name": device.device_name(),
            "device_count": device.device_count(),
            "memory_gib": device.total_memory_gib(),
            "peak_bf16_flops": target.peak_bf16_flops,
            "peak_fp8_flops": target.peak_fp8_flops,
            "peak_source": target.peak_source,
            "capabilities": sorted(caps),
            "listed_in_scenario": scenario.lists_target(target.name),
        },
        "provenance": {**provenance(plan.command, plan.commit), "run_id": uuid.uuid4().hex[:12]},
        "workload": workload,
        # processes per rung (torchrun): workload.batch_size is each one's, a step trains all (BatchSizes.global_)
        "nproc": plan.nproc,
        "torchrun_args": list(plan.torchrun_args or []),
        **({"repeats": plan.repeats} if plan.repeats > 1 else {}),
        **(plan.header_extra or {}),
    }


def earlier_part(out_path: Path, scenario: Scenario, target: Target, header: dict) -> dict:
    """The rungs of an earlier run to append to (their records by name); the header learns its provenance."""
    old = load_result(out_path)
    if old["scenario"]["name"] != scenario.name or old["target"]["name"] != target.name:
        raise InputError(
            str(out_path),
            "scenario/target",
            f"{scenario.name} on {target.name} to append to",
            f"{old['scenario']['name']} on {old['target']['name']} (use another --out)",
        )
    header["provenance_earlier"] = [old["provenance"], *old.get("provenance_earlier", [])]
    if "floor" in old:  # measured by an earlier part; a new --floor replaces it
        header["floor"] = old["floor"]
    return {r["name"]: r for r in old["rungs"]}


class _Run:
    """One `vlabench run`: the header first, then the file rewritten after every rung process."""

    def __init__(self, scenario: Scenario, target: Target, out_path: Path, plan: RunPlan, progress):
        self.scenario, self.target, self.out_path, self.plan, self.progress = scenario, target, out_path, plan, progress
        self.family = get_family(scenario.model)
        self.spec = scenario_spec(scenario, target)  # each rung's: its options and loader over these
        self.workload = self.spec.workload
        self.caps = capabilities(target, plan.nproc)
        self.header = result_header(scenario, target, self.spec.workload_record(), self.caps, plan)
        self.memory = MemoryPlanner(scenario, self.header["workload"], self.header["target"]["memory_gib"], target.name)
        self.earlier: dict[str, dict] = {}  # --append: the rungs of the file appended to
        if plan.append and out_path.exists():
            self.earlier = earlier_part(out_path, scenario, target, self.header)
        self.records = dict(self.earlier)

    def run(self) -> dict:
        scenario, plan = self.scenario, self.plan
        selected = plan.rung_names or scenario.rung_names()
        check_dataset(scenario, self.workload, selected, self.progress)
        # the earlier part's rungs are in the first write too: no moment holds a file without them
        self.writer = ResultWriter(self.out_path, {**self.header, "rungs": self.ordered_rungs()})
        if plan.floor:
            self.progress(f"kernel floor of the workload on {self.target.name}")
            floor_spec = dataclasses.replace(self.spec, floor_fp8="fp8" in self.caps)
            floor = measure_floor_process(floor_spec, self.progress, plan.rung_timeout_s)
            self.writer.set("floor", floor)
        todo = [r for r in scenario.ladder if r.name in selected]
        done: dict[str, list[dict]] = {}
        for round_index in range(plan.repeats):
            for i, rung in enumerate(rotated(todo, round_index), 1):
                where = (
                    f"[{i}/{len(todo)}]"
                    if plan.repeats == 1
                    else f"[repeat {round_index + 1}/{plan.repeats}, {i}/{len(todo)}]"
                )
                rec, interrupted = self.run_rung(rung, where)
                done.setdefault(rung.name, []).append({**rec, "repeat": round_index} if plan.repeats > 1 else rec)
                self.records[rung.name] = self.kept_or_new(self.rung_record(done[rung.name]))
                self.commit()
                if interrupted is not None:
                    raise interrupted
        return self.writer.data

    def rung_record(self, repeats: list[dict]) -> dict:
        if self.plan.repeats == 1:
            return repeats[0]
        keys = ("name", "options", "rung_options", "loader_options", "substituted")
        shared = {k: repeats[0][k] for k in keys if k in repeats[0]}
        per_repeat = [{k: v for k, v in r.items() if k not in keys} for r in repeats]
        return {**shared, **combine(per_repeat, self.spec.batches(self.plan.nproc).global_)}

    def kept_or_new(self, new: dict) -> dict:
        """The record to keep for a rung just measured: --append replaces an ok rung of the earlier part only with
        an ok one; a re-measure that failed, crashed or was interrupted leaves the old record, noting the attempt."""
        old = self.earlier.get(new["name"])
        if old is None or old["status"] != "ok" or new["status"] == "ok":
            return new
        attempt = {
            "status": new["status"],
            "reason": new.get("reason"),
            "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "run_id": self.header["provenance"]["run_id"],
        }
        self.progress(f"    (kept the earlier ok record of {new['name']}: this attempt is noted in failed_attempts)")
        return {**old, "failed_attempts": [*old.get("failed_attempts", []), attempt]}

    def ordered_rungs(self) -> list[dict]:
        """The records in ladder order, with their speedups and loss parity."""
        rungs = [self.records[r.name] for r in self.scenario.ladder if r.name in self.records]
        add_comparisons(rungs, self.family, self.scenario, self.workload)
        return rungs

    def commit(self):
        self.writer.set("rungs", self.ordered_rungs())

    def run_rung(self, rung, where: str) -> tuple[dict, KeyboardInterrupt | None]:
        """One rung process; returns its record and the Ctrl-C that stopped it, if one did."""
        target, plan, workload = self.target, self.plan, self.workload
        self.progress(
            f"{where} {rung.name} on {target.name} ({workload.model_size} model, batch {workload.batch_size})"
        )
        started = time.perf_counter()
        rung, substituted = with_substitutes(self.scenario, target, rung, self.caps)
        rung, memory, too_big = self.memory.apply(rung)
        if memory is not None:
            self.progress("    " + memory_line(memory))
        reason = too_big or unsupported_reason(self.scenario, target, rung, self.caps)
        interrupted = None
        if reason:
            rec = {"status": "unsupported", "reason": reason}
        else:
            spec = self.spec.for_rung(rung)
            try:
                rec = run_rung_process(
                    spec, self.progress, plan.rung_timeout_s, plan.env, plan.nproc, plan.torchrun_args
                )
            except KeyboardInterrupt as exc:  # the rung's processes are ended; record it and keep the rest
                how = exc.args[0] if exc.args else "Ctrl-C"  # SIGTERM or SIGHUP: processes.signals_as_interrupt
                rec = {"status": "error", "reason": f"interrupted ({how}) after {time.perf_counter() - started:.0f}s"}
                interrupted = exc
        provenance_now = self.header["provenance"]
        rec = {
            "name": rung.name,
            "options": rung.cumulative,
            "rung_options": rung.options,
            **({"loader_options": rung.loader_cumulative} if rung.loader_cumulative else {}),
            **rec,
            "wall_s": time.perf_counter() - started,
            # which code and which run measured this rung (a ladder split over calls merges rungs of several runs)
            "measured": {k: provenance_now[k] for k in ("git_sha", "dirty", "created_at", "run_id")},
        }
        if memory is not None:
            rec["memory_plan"] = memory
        if substituted:
            rec["substituted"] = substituted
            self.progress(f"    (on {target.name}: " + ", ".join(f"{k} {v}" for k, v in substituted.items()) + ")")
        self.progress(
            f"    -> {rec['status']}"
            + (f": {rec['reason']}" if rec.get("reason") else f", {rec['samples_per_s']:.2f} samples/s")
        )
        return rec, interrupted
