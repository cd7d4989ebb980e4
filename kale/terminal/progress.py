"""Progress that moves while long fits run, and one log line per fit when nobody watches.

A forecaster fit can take minutes with nothing to count (no folds, no steps), so a bar
that only advances between fits sits still and looks hung. :class:`FitProgress` keeps the
bar's clock moving while a fit runs (a small thread refreshes it) and names the model being
fitted. When stderr is not a terminal (CI logs, ``2> file``) it writes one line per fit
instead — which model, on how many steps, how long — so a redirected run is not silent.

Used by ``kale forecast`` (every fit) and meant for any other long path that fits models
(``kale simulate``'s refits): wrap each fit in ``with progress.fit(name, steps=n):`` or hand
the model through :meth:`FitProgress.watch`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO, TypeVar, cast

_M = TypeVar("_M")


class FitProgress:
    """Progress of ``total`` fits (``None``: unknown); a context manager that closes the bar.

    ``interactive`` defaults to whether ``stream`` is a terminal.
    """

    def __init__(
        self,
        total: int | None,
        *,
        label: str,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        refresh_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.label = total, label
        self._stream = stream
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.refresh_s = refresh_s
        self.clock = clock
        self.done = 0
        self._bar: Any = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __enter__(self) -> FitProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    @contextlib.contextmanager
    def fit(self, name: str, *, steps: int | None = None) -> Iterator[None]:
        """Show that ``name`` is being fitted while the block runs."""
        began = self.clock()
        if not self.interactive:
            outcome = "failed after"
            try:
                yield
                outcome = "fitted in"
            finally:
                self.done += 1
                self._line(name, steps, outcome, self.clock() - began)
            return
        bar = self._open_bar()
        bar.set_postfix_str(f"fitting {name}" + (f" on {steps:,} steps" if steps else ""))
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(bar, stop), daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            self.done += 1
            bar.set_postfix_str(f"{name} took {self.clock() - began:.1f} s")
            bar.update(1)

    def watch(self, model: _M, name: str) -> _M:
        """``model`` with its ``fit(history, ...)`` shown as one fit (everything else as is:
        the wrapper passes every other attribute through, so it stands in for the model)."""
        return cast(_M, _Watched(model, self, name))

    # -- drawing ---------------------------------------------------------------------------
    def _open_bar(self) -> Any:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, desc=self.label, unit="fit", file=self.stream, leave=False
            )
        return self._bar

    def _tick(self, bar: Any, stop: threading.Event) -> None:
        while not stop.wait(self.refresh_s):
            bar.refresh()  # the elapsed time moves even though no fit has finished

    def _line(self, name: str, steps: int | None, outcome: str, seconds: float) -> None:
        count = f"{self.done}/{self.total}" if self.total else str(self.done)
        on = f" on {steps:,} steps" if steps else ""
        print(
            f"kale: {self.label}: {name}{on} {outcome} {seconds:.1f} s ({count})",
            file=self.stream,
            flush=True,
        )


class _Watched:
    """A model whose ``fit`` is reported to a :class:`FitProgress`; the rest passes through."""

    def __init__(self, inner: Any, progress: FitProgress, name: str) -> None:
        self._inner, self._progress, self._name = inner, progress, name

    def fit(self, history: Any, *args: Any, **kwargs: Any) -> Any:
        steps = len(history) if hasattr(history, "__len__") else None
        with self._progress.fit(self._name, steps=steps):
            self._inner.fit(history, *args, **kwargs)
        return self

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)
