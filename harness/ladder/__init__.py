"""Running a ladder: the runner (runner) starts one process group (processes) per rung (rung), data-parallel through
distributed (the bucketed averaging it may apply is models/ddp.py); the recompute sweep (sweep), the kernel floor (floor),
the profiler (profile), the test-only training sabotage both the rungs and `vlabench train` read (sabotage). Their
commands are in harness/commands/."""
