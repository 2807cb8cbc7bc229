"""vlabench harness: scenarios, hardware targets, runner, timing, results, gates and reports."""
