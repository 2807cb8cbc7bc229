"""Judging results: the regression gate (gates) and how well it decides (gate_power), trained rungs over training
seeds (seeds), comparison with published figures (compare, published), A/B of two versions of the code (ab); the
commands gate/record and compare (*_cli)."""
