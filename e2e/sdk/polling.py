"""What both SDK suites wait with."""

import time

WAIT = 180  # seconds any one wait may take


def wait_until(what, check, limit=WAIT):
    """Polls check() every half second until it returns a true value; fails after limit."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit}s waiting for {what}")
        time.sleep(0.5)
