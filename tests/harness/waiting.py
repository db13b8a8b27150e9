"""Polling until a condition holds, for tests that watch l5pgd's log, metrics or sockets."""
import time


def wait_for(predicate, timeout, what, interval=0.02):
    """Calls predicate() until it is true; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
