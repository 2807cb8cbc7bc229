"""`vlabench floor`: the workload's kernel floor, measured in a process of its own."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ..arguments import resolve_target
from ..errors import EXIT_OK, fail
from ..ladder import runner  # runner.measure_floor_process, looked up when called: tests stand in for it
from ..machine.hardware import capabilities, get_device
from ..outputs import check_out_file, positive_seconds
from ..report.report import floor_table
from ..results import ResultWriter, provenance
from ..scenario import load_scenario
from ..spec import scenario_spec
from .run import default_out


def add_floor_arguments(floor) -> None:
    floor.add_argument("scenario", help="scenario YAML file")
    floor.add_argument("--target", help="target name; default: auto-detect")
    floor.add_argument("--out", type=Path, help="result JSON path")
    floor.add_argument(
        "--rung-timeout",
        type=float,
        default=None,
        metavar="S",
        help="end the measurement's process group after S seconds",
    )
    floor.add_argument("--timeout", type=float, help=argparse.SUPPRESS)  # the earlier name of --rung-timeout
    floor.add_argument("--overwrite", action="store_true", help="replace an existing --out (without it: refuse)")


def cmd_floor(args) -> int:
    # --rung-timeout, as on run and recompute-sweep; --timeout is its earlier name, still accepted (hidden)
    timeout_flag, timeout = (
        ("--timeout", args.timeout) if args.timeout is not None else ("--rung-timeout", args.rung_timeout)
    )
    positive_seconds(timeout_flag, timeout)
    scenario = load_scenario(args.scenario)
    target, error = resolve_target(scenario, args.target)
    if error:
        return fail(error)
    out = args.out or default_out(scenario, target.name, "-floor")
    check_out_file(out, overwrite=args.overwrite)
    spec = dataclasses.replace(scenario_spec(scenario, target), floor_fp8="fp8" in capabilities(target))
    device = get_device(target.backend, target_name=target.name)
    floor = runner.measure_floor_process(spec, print, timeout)
    header = {
        "kind": "floor",
        "scenario": {"name": scenario.name, "path": scenario.path, "sha256": scenario.sha256},
        "target": {
            "name": target.name,
            "backend": target.backend,
            "device_name": device.device_name(),
            "device_count": device.device_count(),
            "listed_in_scenario": scenario.lists_target(target.name),
        },
        "provenance": provenance(["vlabench", *args.argv]),
        "workload": spec.workload_record(),
        "rungs": [],
        "floor": floor,
    }
    result = ResultWriter(out, header).data
    if "error" in floor:
        return fail(f"{floor['error']}: " + " | ".join(floor.get("output_tail", [])[-2:]))
    print(floor_table(result))
    print(f"\nresult: {out}")
    return EXIT_OK
