"""Stall reports: a run whose process stops using the CPU is stopped, with its stacks, not left hanging.

XLA's CPU runtime can wait forever on a computation that never completes: the process at 0%
CPU, the main thread in ``BlockUntilReady``. ``absorbjax reproduce`` met it twice in
``models.sample`` under ``experiments/cor11.py`` on a 2-core machine. The cause, read from the
native stacks the second time: two batched LAPACK QRs of one program ran side by side on the two
threads of XLA's intra-op pool, and each fanned its batch out into that same pool and waited, so
nothing was left to run the parts. ``models`` now orders those QRs; ``absorbjax reproduce`` also
dispatches inline on the CPU, as a precaution (programs dispatched asynchronously were not seen to
overlap). No computation of absorbjax sleeps, so a long stretch without CPU time is a stall, and
:func:`watch` turns it into a report and an exit code.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time

__all__ = ["watch", "STALL_EXIT"]

STALL_EXIT = 3  # the exit code of a run stopped by :func:`watch`


@contextlib.contextmanager
def watch(seconds: float, *, message: str = "", poll: float | None = None):
    """Within the block, stop the process when it uses no CPU for ``seconds``.

    A daemon thread reads the process's CPU time (all its threads) every ``poll`` seconds
    (default ``seconds / 20``, at most 30 s). When it has advanced by less than 1% of the time
    since the last advance for ``seconds`` in a row, the thread writes to ``stderr`` how long
    the process was idle, ``message``, and every thread's Python stack, then ends the process
    with :data:`STALL_EXIT` (``os._exit``: what was saved stays saved; nothing else runs).
    ``seconds <= 0`` watches nothing. Child processes' CPU time is not counted.

    Examples:
      >>> from absorbjax.lab import stall
      >>> with stall.watch(600):
      ...     total = sum(range(10))
      >>> total
      45
    """
    if seconds <= 0:
        yield
        return
    poll = min(seconds / 20, 30.0) if poll is None else poll
    done = threading.Event()

    def run():
        last_cpu, last_wall = time.process_time(), time.monotonic()
        while not done.wait(poll):
            cpu, wall = time.process_time(), time.monotonic()
            if cpu - last_cpu > 0.01 * (wall - last_wall):
                last_cpu, last_wall = cpu, wall
            elif wall - last_wall >= seconds:
                _report(wall - last_wall, message)

    thread = threading.Thread(target=run, name="absorbjax-stall-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _report(idle: float, message: str) -> None:
    print(
        f"\nabsorbjax: the process has used no CPU for {idle:.0f} s: stopped as stalled (exit {STALL_EXIT})."
        + (f"\n{message}" if message else "")
        + "\nPython stacks of every thread:",
        file=sys.stderr,
        flush=True,
    )
    try:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, OSError):  # a stderr without a file descriptor
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
    sys.stderr.flush()
    os._exit(STALL_EXIT)
