"""A DataLoader with its worker processes started, and torch's warning about more workers than CPUs said once."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

from torch.utils.data import DataLoader


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), as torch's DataLoader counts them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def started_loader(dataset, workers: int, **options) -> tuple[DataLoader, Iterator]:
    """A DataLoader of `workers` worker processes and its iterator (the workers started). Torch warns when it is
    made and again when it is iterated (twice per rung) if the workers outnumber the usable CPUs; one line of ours
    says it instead. The count is kept: it is the rung's `loader: workers` (or --loader-workers), part of the input
    pipeline that is measured and recorded."""
    cpus = usable_cpus()
    if workers > cpus:
        print(f"loader: {workers} worker processes share {cpus} usable CPUs (kept: they are part of what is measured)")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        loader = DataLoader(dataset, num_workers=workers, **options)
        return loader, iter(loader)
