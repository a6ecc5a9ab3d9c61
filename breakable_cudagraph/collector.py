"""Keeps Python's cyclic collector off while a capture is open in any thread.

The collector frees graphs held in reference cycles whenever it runs, and freeing a captured
graph while a capture is open breaks that capture in "global" and "thread_local" mode: torch
only warns ("operation not permitted when stream is capturing") and the capture fails at its
next op (H200, torch 2.11, ``bench/probes/reset_during_capture.py``). ``pause()`` and
``resume()`` are counted, so that the last capture to close turns the collector back on, and
only if it was on before the first one opened.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_open = 0
_restore = False


def pause() -> None:
    global _open, _restore
    with _lock:
        if _open == 0:
            _restore = gc.isenabled()
            gc.disable()
        _open += 1


def resume() -> None:
    global _open
    with _lock:
        _open -= 1
        if _open == 0 and _restore:
            gc.enable()
