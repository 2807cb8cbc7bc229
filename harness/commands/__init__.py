"""The commands of `vlabench`, a module per command (or pair of commands: gate and record, train and train-check,
recompute-sweep and recompute-plan), registered in harness/cli.py. Each holds its `add_*_arguments` and `cmd_*`
functions and stays thin over the library below it: the options, their checks (one line naming the flag or the
file), the calls into ladder/, eval/, train/, judge/, report/ and the others, and what it prints. This package is
the top of harness/: no module outside it imports it (tests/test_layers.py holds the order of the layers)."""
