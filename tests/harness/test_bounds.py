"""The bound on a call into the target: a call blocked on a lock is reported as a hang naming
the block and the call open in it; a call that returns is untouched and leaves no timer
behind; nested blocks are safe; calls that each return in time never add up to a hang."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from verification import bounds, breadcrumbs

BOUND_S = 0.3


def _untouched() -> None:
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is not bounds._ring


def test_a_call_blocked_on_a_lock_is_reported_as_a_hang():
    lock = threading.Lock()
    lock.acquire()
    began = time.monotonic()
    with bounds.limit(BOUND_S), pytest.raises(bounds.Hang) as hang:
        with bounds.bounded("replay 1 of the program"):
            with breadcrumbs.calling("break step 2 (attention)"):
                lock.acquire()  # never released: the target's own lock, taken again
    assert time.monotonic() - began < 10 * BOUND_S
    assert hang.value.words() == (
        f"hang: replay 1 of the program did not return within {BOUND_S:g} s "
        "(break step 2 (attention))"
    )
    assert breadcrumbs.open_here() == []
    _untouched()


def test_a_call_that_returns_is_untouched():
    with bounds.limit(BOUND_S):
        with bounds.bounded("a capture"):
            value = sum(range(10))
    assert value == 45
    _untouched()


def test_calls_that_each_return_within_the_bound_never_add_up_to_a_hang():
    with bounds.limit(BOUND_S), bounds.bounded("a scenario of many calls"):
        for _ in range(6):  # twice the bound in all
            with breadcrumbs.calling("replay()"):
                time.sleep(BOUND_S / 3)
    _untouched()


def test_nested_blocks_name_the_innermost_and_the_outer_stays_bounded():
    lock = threading.Lock()
    lock.acquire()
    with bounds.limit(BOUND_S), bounds.bounded("a check's unit"):
        with pytest.raises(bounds.Hang) as inner:
            with bounds.bounded("replay of capture B"):
                lock.acquire()
        assert inner.value.what == "replay of capture B"
        with bounds.bounded("replay of capture A"):
            pass  # a block that returns, after a hang, inside the same outer block
        with pytest.raises(bounds.Hang) as outer:
            lock.acquire()  # the outer block is still bounded
        assert outer.value.what == "a check's unit"
    _untouched()


def test_off_the_main_thread_a_block_is_not_bounded_here():
    done: list[bool] = []

    def work() -> None:
        with bounds.limit(BOUND_S), bounds.bounded("a capture in another thread"):
            time.sleep(2 * BOUND_S)
        done.append(True)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert done == [True]
    _untouched()
