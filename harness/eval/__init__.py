"""LIBERO closed-loop evaluation: the openpi protocol (protocol.py), the simulator setup (sim.py), LIBERO
tasks and environments (env.py), one episode of the protocol in one (episode.py), env worker processes
(workers.py), policies (policies.py, each a models.policy.EvalPolicy; a scripted expert reading privileged
simulator state in expert.py and simstate.py), the parallel runner with batched inference and per-episode
result records (runner.py), an evaluation and its result file (main.py run_eval) and LIBERO demonstrations
written as a dataset's episodes (demonstrations.py, `make-dataset --source libero`).

Nothing here imports MuJoCo, robosuite or LIBERO at import time: they are optional (the `sim` extra)
and need environment variables set before their first import (sim.prepare)."""
