"""Running a command that serves a page (`vat explore`, a Space's app.py) in the test's own
process until Ctrl-C: a real SIGINT, sent to the main thread as a terminal sends it, once
another thread has checked the page. The commands' own processes and their Ctrl-C are tested
once each, in subprocesses (tests/test_explore.py); these save an interpreter start-up, with
torch, Lightning and gradio, per test."""

from __future__ import annotations

import io
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ctrl_c_once(
    run: Callable[[], Any], serving: Callable[[], Any], timeout: float = 300
) -> tuple[Any, Any]:
    """`run()` in this thread, the main one, while another thread calls `serving()` until it
    returns something other than None (it checks the page that run() serves once it is
    served, and returns what it saw), then presses Ctrl-C. Returns (what run returned, what
    serving returned). An exception of serving() (a failed check) is raised here once run()
    has returned, the page stopped; so is a page not served within `timeout` seconds (Ctrl-C
    is pressed then too, so that nothing waits for ever)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches only the main thread")  # pytest and xdist run tests there
    finished = threading.Event()
    seen: dict[str, Any] = {}

    def watch() -> None:
        deadline = time.monotonic() + timeout
        try:
            while not finished.is_set():
                seen["value"] = serving()
                if seen["value"] is not None:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"the page was not served within {timeout:g} s")
                time.sleep(0.2)
        except BaseException as e:  # raised in the main thread
            seen["error"] = e
        if not finished.is_set():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        try:
            result = run()
        finally:
            finished.set()
            watcher.join()
    except KeyboardInterrupt:  # not pytest's: a stray Ctrl-C must not end the session
        pytest.fail(f"Ctrl-C reached the command outside its wait: {seen}")
    if "error" in seen:
        raise seen["error"]
    return result, seen.get("value")


def main_thread_in(function: str) -> bool:
    """Whether the main thread is running `function` (by name) now."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


class Stdout(io.StringIO):
    """sys.stdout of a command run in-process, which another thread reads."""

    def has(self, text: str) -> bool:
        return text in self.getvalue()
