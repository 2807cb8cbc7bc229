"""Training a rung to a checkpoint (`vlabench train`): openpi's recipe (recipe.py), the rung built as the ladder
builds it (setup.py), the loop, checkpoints an evaluation loads (loop.py, checkpoints.py), the convergence check
(convergence.py), the test-only sabotage it must catch (harness/ladder/sabotage.py) and wall-clock predictions (predict.py).
docs/training.md describes them."""
