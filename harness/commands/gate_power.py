"""`vlabench gate-power`: how the speed gate decides on the committed results (harness/judge/gate_power.py)."""

from __future__ import annotations

from pathlib import Path

from ..arguments import parse_percent
from ..errors import InputError
from ..judge.gate_power import power_block
from ..judge.gates import Limits


def add_gate_power_arguments(parser) -> None:
    parser.add_argument("--repo", default=".", help="repository root whose results/ are used (default: .)")
    parser.add_argument("--tolerance", default="5%", help="throughput tolerance (default 5%%)")


def cmd_gate_power(args) -> int:
    tolerance = parse_percent(args.tolerance)
    if tolerance is None or not 0 < tolerance < 1:
        raise InputError("--tolerance", None, "a percentage like 5%", repr(args.tolerance))
    print(power_block(Path(args.repo), Limits(tolerance=tolerance)))
    return 0
