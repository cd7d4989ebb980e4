"""The demo as a process: signals that stop it, a log file, a browser window, leftovers.

Why this module exists: the demo must end cleanly on Ctrl-C and SIGTERM and keep the terminal
for its progress lines and table; these helpers do that and nothing of the demo's logic.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (main thread only; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def log_to(path: Path) -> Iterator[None]:
    """Send log records to ``path`` (the terminal keeps the progress lines and the table)."""
    root = logging.getLogger()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = (root.level, list(root.handlers))
    for h in saved[1]:
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    kafka_level = logging.getLogger("kafka").level
    logging.getLogger("kafka").setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in saved[1]:
            root.addHandler(h)
        root.setLevel(saved[0])
        logging.getLogger("kafka").setLevel(kafka_level)


def alive_workers(app: Any) -> int:
    n = 0
    for rt in list(app.controller.runtimes.values()):
        with contextlib.suppress(Exception):
            n += rt.actuator.current().workers
    return n


def open_browser(url: str) -> None:
    """Open the page where a desktop exists (never a console browser in the terminal)."""
    import os
    import webbrowser

    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return
    threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
