"""Checks every test gets for free."""

import os

import pytest


@pytest.fixture(autouse=True)
def scheduling_is_left_alone():
    """A test must leave the process at the scheduling policy it found: SVT-AV1 run as root switches the thread
    that opens an encoder to SCHED_FIFO 99 (harness/data/video.py, own_scheduling), and every process started
    after that inherits it; a busy loop among them never yields its CPU and a later measurement hangs (a CI run
    of this suite did, after a test opened an encoder outside own_scheduling)."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    before = os.sched_getscheduler(0)
    yield
    after = os.sched_getscheduler(0)
    if after != before:
        os.sched_setscheduler(0, before, os.sched_param(0))  # the next tests run as they would have
        pytest.fail(f"the test left the scheduling policy at {after} (it found {before})")
