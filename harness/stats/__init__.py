"""Figures from measurements: step-time summaries (timing), intervals and ratios with the one slowdown rule (spread),
repeats combined (repeats), success-rate statistics (rates) and the cross-checks of a result's stated figures
against its data (result_checks)."""
