"""Judging results: the regression gate (gates) and how well it decides (gate_power), trained rungs over training
seeds (seeds), comparison with published figures (compare, published), A/B of two versions of the code
(ab). Their commands are in harness/commands/."""
