"""The `vlabench` command line: the parser and the dispatch. Each command's arguments and its `cmd_*` function
live in harness/commands/ (a module per command or pair of commands); this module only registers them."""

from __future__ import annotations

import argparse
import sys

from models import UnknownFamilyError
from models.extras import SetupError, missing_extra
from models.schema import SchemaError

from .commands.ab import add_ab_arguments, cmd_ab
from .commands.compare import add_compare_arguments, cmd_compare
from .commands.eval import add_eval_arguments, cmd_eval
from .commands.floor import add_floor_arguments, cmd_floor
from .commands.gate import add_gate_arguments, add_record_arguments, cmd_gate, cmd_record
from .commands.gate_power import add_gate_power_arguments, cmd_gate_power
from .commands.make_dataset import add_make_dataset_arguments, cmd_make_dataset
from .commands.profile import add_profile_arguments, cmd_profile
from .commands.readme import add_readme_arguments, cmd_readme
from .commands.recompute import (
    add_recompute_plan_arguments,
    add_recompute_sweep_arguments,
    cmd_recompute_plan,
    cmd_recompute_sweep,
)
from .commands.report import add_report_arguments, cmd_report
from .commands.run import add_run_arguments, cmd_run
from .commands.show import add_show_arguments, cmd_show
from .commands.site import add_site_arguments, cmd_site
from .commands.train import add_train_arguments, add_train_check_arguments, cmd_train, cmd_train_check
from .commands.train_ladder import add_train_ladder_arguments, cmd_train_ladder
from .commands.train_seeds import add_train_seeds_arguments, cmd_train_seeds
from .errors import ClosedPipeSafe, InputError, fail, internal_failure

__all__ = ["build_parser", "main"]

# (command, help, the function that adds its arguments, the function that runs it), in `vlabench --help` order
COMMANDS = (
    ("run", "run a scenario's ladder on a target", add_run_arguments, cmd_run),
    (
        "recompute-sweep",
        "cost of recomputing each module group: ms per GiB saved",
        add_recompute_sweep_arguments,
        cmd_recompute_sweep,
    ),
    (
        "recompute-plan",
        "the cheapest module groups to recompute under a memory budget, from a sweep",
        add_recompute_plan_arguments,
        cmd_recompute_plan,
    ),
    (
        "floor",
        "the workload's kernel floor: every GEMM and attention call at the vendor "
        "library's speed, summed into samples/s (bf16 and FP8)",
        add_floor_arguments,
        cmd_floor,
    ),
    ("profile", "where one rung's step goes: kernels, launch gaps, data wait", add_profile_arguments, cmd_profile),
    ("show", "print the ladder table of result files", add_show_arguments, cmd_show),
    (
        "gate",
        "regression gate: a result against a recorded baseline (exit 0 pass, 1 regression, 2 unusable "
        "input, 3 inconclusive: the evidence cannot tell, or a slower machine explains it)",
        add_gate_arguments,
        cmd_gate,
    ),
    (
        "record",
        "promote a result to the recorded baseline of its scenario and target (the replaced one kept as history)",
        add_record_arguments,
        cmd_record,
    ),
    (
        "compare",
        "per-hardware comparison tables, with verdicts against published figures",
        add_compare_arguments,
        cmd_compare,
    ),
    ("report", "markdown report with figures (matplotlib) of result files", add_report_arguments, cmd_report),
    (
        "gate-power",
        "how the speed gate decides on the committed results: injected changes, same-code repeats",
        add_gate_power_arguments,
        cmd_gate_power,
    ),
    (
        "eval",
        "LIBERO closed-loop evaluation (openpi protocol) with parallel env workers",
        add_eval_arguments,
        cmd_eval,
    ),
    (
        "train",
        "train one rung of a scenario on a dataset to a checkpoint (openpi's recipe)",
        add_train_arguments,
        cmd_train,
    ),
    (
        "train-check",
        "convergence: each run's smoothed final loss against a reference run's",
        add_train_check_arguments,
        cmd_train_check,
    ),
    (
        "train-ladder",
        "train -> evaluate -> gate: each rung of a scenario's train: block trained, evaluated "
        "in LIBERO and judged against the reference rung",
        add_train_ladder_arguments,
        cmd_train_ladder,
    ),
    (
        "train-seeds",
        "trained rungs over training seeds: the success gate against the reference rung with the spread between "
        "training runs counted (exit 0/1/2/3, as gate)",
        add_train_seeds_arguments,
        cmd_train_seeds,
    ),
    ("ab", "A/B of two versions of the code on this machine (exit 0/1/2/3, as gate)", add_ab_arguments, cmd_ab),
    (
        "make-dataset",
        "write a LeRobotDataset v3.0 folder (synthetic episodes)",
        add_make_dataset_arguments,
        cmd_make_dataset,
    ),
    (
        "readme",
        "regenerate docs/results.md, docs/hardware.md, the README's headline and the figure from results/",
        add_readme_arguments,
        cmd_readme,
    ),
    (
        "site",
        "static results site (HTML and PNG files) of the committed results: a scenarios x cards matrix, per-card "
        "tables, waterfalls, each rung's history and the trained-policy tables",
        add_site_arguments,
        cmd_site,
    ),
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vlabench")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vlabench",
        description="Reproduce published VLA training speedups.",
        epilog="exit status: 0 success (a gate: pass); 1 a failed check (a gate: regression); 2 unusable input, "
        "one line naming the file, key or flag; 3 inconclusive (gate-like commands); 4 internal failure, one "
        "line naming the log file that holds the traceback; 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"vlabench {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_, add_arguments, cmd in COMMANDS:
        command = sub.add_parser(name, help=help_)
        add_arguments(command)
        command.set_defaults(func=cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv  # the command as given, for provenance lines
    stdout = sys.stdout
    sys.stdout = ClosedPipeSafe(stdout)  # `vlabench show X | head -1`: the rest is dropped, the exit status kept
    try:
        return args.func(args)
    except (InputError, SchemaError, SetupError, UnknownFamilyError) as exc:  # the user's input: one line
        return fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except KeyboardInterrupt:
        print("\ninterrupted: finished rungs are kept in the result file", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # an optional extra not installed is the user's to fix; another module is a bug
        line = missing_extra(exc)
        return fail(line) if line else internal_failure(exc, args.argv)
    except Exception as exc:  # a bug or a device failure, not the user's input: the traceback goes to a log
        return internal_failure(exc, args.argv)
    finally:
        sys.stdout.flush()
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
