"""A profile (`vlabench profile`): one rung's kernel time, launches and data wait (harness/ladder/profile.py
profile_rung). It has no `kind` key and no `rungs`: `rung` and `steps` tell it apart from a ladder. It is no
ResultFile: its schema is its own (ProfileFile), and only `vlabench show` loads it, printing what `vlabench profile`
printed when it ran (profile_table: the step's split, the gaps between kernels, the top kernels and kernels by kind).
Profiles written before a block was added lack it (`device`, `kernel_kinds`, `provenance`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Expect, SchemaError

from . import ResultKind, register

Time = Annotated[float, NON_NEGATIVE]


@dataclass(frozen=True)
class KernelRow:
    """A row of the top kernels (`name`) or of the kernels by kind (`kind`)."""

    __open_schema__ = True
    calls_per_step: Time
    ms_per_step: Time


@dataclass(frozen=True)
class GapClass:
    __open_schema__ = True
    count_per_step: Time
    ms_per_step: Time


@dataclass(frozen=True)
class Gap:
    __open_schema__ = True
    us: Time
    after: str
    before: str


@dataclass(frozen=True)
class DeviceBlock:
    """The device's busy time and idle gaps per step (harness/ladder/profile.py device_gaps)."""

    __open_schema__ = True
    busy_s: Time
    gap_s: Time
    gaps: dict[str, GapClass]
    largest_gaps: Annotated[tuple[Gap, ...], Expect("a list of gap records")]
    between_steps_ms_per_step: Time | None = None


@dataclass(frozen=True)
class ProfileFile:
    """What `vlabench profile --out` writes (harness/commands/profile.py write_profile)."""

    __open_schema__ = True
    scenario: str
    rung: str
    target: str
    batch_size: Annotated[int, AT_LEAST_ONE]
    steps: Annotated[int, AT_LEAST_ONE]
    wall_s: Annotated[float, POSITIVE]
    kernel_s: Time
    data_wait_s: Time
    kernel_launches: Time
    top_kernels: Annotated[tuple[KernelRow, ...], Expect("a list of kernel records")]
    device_busy_share: Annotated[float, NON_NEGATIVE] | None = None  # null off a GPU
    idle_s: Time | None = None
    kernel_kinds: Annotated[tuple[KernelRow, ...], Expect("a list of kernel-kind records")] | None = None
    device: DeviceBlock | None = None
    provenance: dict[str, Any] | None = None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def _gap_classes() -> tuple[str, ...]:
    # here: the registry imports this module on its first lookup (docs/extending.md)
    from ..ladder.profile import GAP_CLASSES

    return tuple(label for label, _, _, _ in GAP_CLASSES)


@register
class Profile(ResultKind):
    name = "profile"
    key = None
    schema = ProfileFile

    def recognise(self, data: dict) -> bool:
        return data.get("kind") is None and "rung" in data and "steps" in data

    def check(self, data: dict) -> None:
        """The figures profile_rung derives from others: the busy share and idle time from the kernel and wall time
        (on a GPU), and a row of each gap class in the device block."""
        wall, kernel, share, idle = data["wall_s"], data["kernel_s"], data.get("device_busy_share"), data.get("idle_s")
        if (share is None) != (idle is None):
            raise SchemaError("idle_s", "a value with device_busy_share (null off a GPU) or neither", "one of them")
        if share is not None and not _close(share, kernel / wall):
            raise SchemaError("device_busy_share", f"kernel_s / wall_s ({kernel / wall:.6g})", f"{share:.6g}")
        if idle is not None and not _close(idle, max(0.0, wall - kernel)):
            raise SchemaError("idle_s", f"wall_s - kernel_s, at least 0 ({max(0.0, wall - kernel):.6g})", f"{idle:.6g}")
        device = data.get("device")
        if device is not None:
            missing = [c for c in _gap_classes() if c not in device["gaps"]]
            if missing:
                raise SchemaError(f"device.gaps.{missing[0]}", "a row of each gap class", "nothing")

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        # here: the registry imports this module on its first lookup (docs/extending.md)
        from ..ladder.profile import profile_table

        return profile_table(_title(data), data)

    def count(self, data: dict) -> str:
        return ""

    def summary(self, data: dict, name: str, target: str) -> str:
        return f"profile of {name}/{data['rung']} on {target}"


def _title(data: dict) -> str:
    """The name `vlabench profile` printed the table under (harness/commands/profile.py cmd_profile)."""
    return f"{data['scenario']}/{data['rung']} on {data['target']}, batch {data['batch_size']}"


__all__ = ["Profile", "ProfileFile"]
