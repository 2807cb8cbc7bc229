"""One environment worker process: runs episodes of the protocol and asks the runner for action chunks.

Messages (over a multiprocessing Pipe):
  runner -> worker: ("episode", spec) | ("chunk", actions) | ("stop", None)
  worker -> runner: ("ready", pid) | ("obs", observation) | ("done", record)
A worker keeps the environment of its last task, since building one takes seconds; an episode that raises
is reported as an error and its environment is rebuilt for the next episode. The episode's `needs` (what the
policy declared: images, privileged state, actions per chunk) decide whether the environment has cameras.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from .protocol import WAIT_STEPS, PolicyNeeds


def worker_main(conn, sim_env: dict) -> None:
    os.environ.update(sim_env)  # before MuJoCo/LIBERO are imported in this process
    sys.stdout = open(os.devnull, "w")  # LIBERO and robosuite chatter; errors come back as messages
    from .env import TaskInfo, make_env
    from .episode import run_episode

    env, env_task = None, None
    conn.send(("ready", os.getpid()))
    try:
        while True:
            kind, spec = conn.recv()
            if kind == "stop":
                break
            task = TaskInfo(**spec["task"])
            needs = PolicyNeeds(**spec["needs"])
            # recorded videos and demonstrations need the cameras, whatever the policy needs
            cameras = needs.images or spec.get("record", False) or spec.get("demonstration", False)
            started = time.perf_counter()
            waited = 0.0
            chunk_index = 0

            def get_chunk(observation, noise_seed=spec["noise_seed"]):
                nonlocal waited, chunk_index
                # The noise of each chunk depends only on the episode and the chunk's index.
                observation["noise_seed"] = noise_seed * 1000 + chunk_index
                chunk_index += 1
                t0 = time.perf_counter()
                conn.send(("obs", observation))
                reply_kind, actions = conn.recv()
                if reply_kind != "chunk":
                    raise RuntimeError(f"expected an action chunk, got {reply_kind!r}")
                waited += time.perf_counter() - t0
                return actions

            record = {"status": "ok"}
            try:
                if env is None or env_task != (task.bddl_file, cameras):
                    if env is not None:
                        env.close()
                    env, env_task = None, None
                    env = make_env(task, seed=spec["seed"], cameras=cameras)
                    env_task = (task.bddl_file, cameras)
                outcome = run_episode(
                    env,
                    spec["init_state"],
                    task.language,
                    spec["max_steps"],
                    get_chunk,
                    record=spec.get("record", False),
                    seed=spec["episode_seed"],
                    render_every_step=spec.get("render_every_step", False),
                    needs=needs,
                    demonstration=spec.get("demonstration", False),
                )
                record.update(
                    success=outcome.success,
                    steps=outcome.steps,
                    failure_reason=outcome.reason,
                    chunks=outcome.chunks,
                    frames=outcome.frames,
                    demo=outcome.demo,
                )
            except Exception as exc:  # the episode is lost, the worker goes on with a fresh environment
                record.update(
                    status="error",
                    success=False,
                    steps=None,
                    chunks=chunk_index,
                    failure_reason=f"error: {type(exc).__name__}: {exc}".splitlines()[0][:300],
                    traceback=traceback.format_exc()[-3000:],
                )
                env, env_task = None, None
            wall = time.perf_counter() - started
            steps = (record.get("steps") or 0) + WAIT_STEPS
            record.update(wall_s=wall, sim_s=wall - waited, env_steps=steps if record["status"] == "ok" else None)
            conn.send(("done", record))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the runner went away or was interrupted
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:
                pass
        conn.close()
        # Skip interpreter teardown: GL contexts destroyed after their library print spurious errors.
        os._exit(0)
