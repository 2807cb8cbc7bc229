"""Whether the LIBERO simulator can run in a test: the sim extra installed and the assets named (the tests that
train and then evaluate skip otherwise, saying which is missing)."""

import os


def sim_unready() -> str | None:
    """Why the simulator cannot run here, or None."""
    from harness.eval import sim

    missing = sim.missing_packages()
    if missing:
        return f"needs the sim extra (missing: {', '.join(missing)})"
    if not os.environ.get(sim.ASSETS_ENV):
        return f"needs LIBERO assets ({sim.ASSETS_ENV})"
    return None


def needs_sim():
    """The skip marker of a test module that runs the simulator (the same reason text as sim_unready)."""
    import pytest

    reason = sim_unready()
    return pytest.mark.skipif(reason is not None, reason=reason or "")
