"""Pi0.5 optimization switches. A ladder rung is a cumulative set of these options."""
from __future__ import annotations

from dataclasses import dataclass

from ..family import OptionError

ATTENTION = ("eager", "sdpa", "flex", "fused")
TIME_SAMPLING = ("harness", "distributions", "fast")
DDP_KEYS = ("find_unused_parameters", "static_graph", "gradient_as_bucket_view", "bucket_cap_mb", "comm_hook")
COMM_HOOKS = ("bf16_compress", "fp16_compress")
COMPILE = ("none", "backbone", "per-layer")
LINEAR = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "rowwise")
RECOMPUTE_PRESETS = ("none", "nested-full")


@dataclass(frozen=True)
class Pi05Options:
    # Image slots the model runs: an int (fixed slots, absent cameras become masked placeholders,
    # the community path) or "auto" (one slot per camera the batch declares).
    camera_slots: int | str = 3
    attention: str = "eager"
    # "none", "nested-full" (openpi's nested checkpointing) or a tuple of module-name glob patterns.
    recompute: str | tuple[str, ...] = "nested-full"
    compile: str = "none"
    linear: str = "bf16"
    fp8_recipe: str = "tensorwise"
    time_sampling: str = "harness"
    fused_qkv: bool = False
    fused_gate_up: bool = False
    # DistributedDataParallel flags, or None for no DDP wrapper (the harness applies it: it owns processes).
    ddp: tuple | None = None

    def as_dict(self) -> dict:
        recompute = self.recompute if isinstance(self.recompute, str) else {"patterns": list(self.recompute)}
        return {"camera_slots": self.camera_slots, "attention": self.attention, "recompute": recompute,
                "compile": self.compile, "linear": self.linear, "fp8_recipe": self.fp8_recipe,
                "time_sampling": self.time_sampling, "fused_qkv": self.fused_qkv,
                "fused_gate_up": self.fused_gate_up, "ddp": None if self.ddp is None else dict(self.ddp)}


def _choice(options: dict, key: str, choices: tuple[str, ...], default: str) -> str:
    value = options.get(key, default)
    if value not in choices:
        raise OptionError(key, "one of " + ", ".join(choices), value)
    return value


def parse_options(options: dict) -> Pi05Options:
    if not isinstance(options, dict):
        raise OptionError("options", "a mapping", options)
    known = {"camera_slots", "attention", "recompute", "compile", "linear", "fp8_recipe", "time_sampling",
             "fused_qkv", "fused_gate_up", "ddp"}
    for key in options:
        if key not in known:
            raise OptionError(str(key), "a known option (" + ", ".join(sorted(known)) + ")", "unknown option")
    slots = options.get("camera_slots", 3)
    if not (slots == "auto" or (isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots <= 8)):
        raise OptionError("camera_slots", "an integer 1..8 or 'auto'", slots)
    recompute = options.get("recompute", "nested-full")
    if isinstance(recompute, dict):
        if set(recompute) != {"patterns"}:
            raise OptionError("recompute", "a preset name or {patterns: [glob, ...]}", recompute)
        patterns = recompute["patterns"]
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
            raise OptionError("recompute.patterns", "a non-empty list of module-name glob patterns", patterns)
        recompute = tuple(patterns)
    elif recompute not in RECOMPUTE_PRESETS:
        raise OptionError("recompute", "one of " + ", ".join(RECOMPUTE_PRESETS) + " or {patterns: [...]}", recompute)
    for key in ("fused_qkv", "fused_gate_up"):
        if not isinstance(options.get(key, False), bool):
            raise OptionError(key, "true or false", options[key])
    ddp = options.get("ddp")
    if ddp is not None:
        if not isinstance(ddp, dict):
            raise OptionError("ddp", "a mapping of DDP flags (" + ", ".join(DDP_KEYS) + ") or null", ddp)
        for key, value in ddp.items():
            if key not in DDP_KEYS:
                raise OptionError(f"ddp.{key}", "one of " + ", ".join(DDP_KEYS), "unknown flag")
            if key == "comm_hook":
                if value not in COMM_HOOKS:
                    raise OptionError("ddp.comm_hook", "one of " + ", ".join(COMM_HOOKS), value)
                continue
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 \
                if key == "bucket_cap_mb" else isinstance(value, bool)
            if not ok:
                raise OptionError(f"ddp.{key}", "a positive number" if key == "bucket_cap_mb" else "true or false", value)
        ddp = tuple(sorted(ddp.items()))
    return Pi05Options(
        camera_slots=slots,
        attention=_choice(options, "attention", ATTENTION, "eager"),
        recompute=recompute,
        compile=_choice(options, "compile", COMPILE, "none"),
        linear=_choice(options, "linear", LINEAR, "bf16"),
        fp8_recipe=_choice(options, "fp8_recipe", FP8_RECIPES, "tensorwise"),
        time_sampling=_choice(options, "time_sampling", TIME_SAMPLING, "harness"),
        fused_qkv=options.get("fused_qkv", False),
        fused_gate_up=options.get("fused_gate_up", False),
        ddp=ddp,
    )
