"""Run a job's workers as local processes: the actuator behind the demo and local mode.

A resize changes the world size every worker was started with, so it restarts them all:
stop every worker (SIGTERM to its process group, SIGKILL after ``grace_s``), then start
``workers`` new ones. That is what a real elastic PS job does too (checkpoint, restart with
the new size), so the demo's downtime is honest. Each process gets its place in the job from
the environment — ``KALE_WORKER_INDEX``, ``KALE_WORKERS``, ``KALE_PS``, ``KALE_JOB`` — and
from ``{index}``, ``{workers}``, ``{ps}``, ``{job}`` placeholders in the command.

No leftovers: each worker leads its own process group (its children die with it), is told by
Linux to die with the controller (``PR_SET_PDEATHSIG``), and every actuator still open at
interpreter exit is closed. A worker that exits on its own shows up as a smaller ``current``
size, so the level-triggered controller starts the job again at its size.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from autoscaler.actuators.base import Size
from kube.errors import TargetRejected

log = logging.getLogger(__name__)

_OPEN: weakref.WeakSet[LocalActuator] = weakref.WeakSet()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def render(command: Sequence[str], *, index: int, size: Size, job: str) -> list[str]:
    """Fill ``{index}``, ``{workers}``, ``{ps}``, ``{job}`` and ``{python}`` (this
    interpreter, so a job file can run ``{python} -m ...`` in Kale's own environment);
    other braces stay as written."""
    values = {
        "index": str(index),
        "workers": str(size.workers),
        "ps": str(size.ps),
        "job": job,
        "python": sys.executable,
    }
    out = []
    for arg in command:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


class LocalActuator:
    """``workers`` copies of ``command`` on this machine."""

    kind = "Local"

    def __init__(
        self,
        command: Sequence[str],
        *,
        job: str = "job",
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        grace_s: float = 10.0,
        per_job: bool = False,
    ) -> None:
        if not command:
            raise TargetRejected(f"{job}: spec.target.command is empty")
        self.command = list(command)
        self.per_job = per_job
        """One process for the whole job (it starts its own workers and PS, as ``kale train``
        does) instead of one per worker."""
        self.job = job
        self.cwd = cwd
        self.env = dict(env or {})
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.grace_s = grace_s
        self.size = Size(0, 0)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        _OPEN.add(self)

    # -- the actuator interface ----------------------------------------------------------
    def current(self) -> Size:
        alive = sum(1 for p in self.procs if not _exited(p))
        if alive == len(self.procs):
            return self.size
        if self.per_job:  # the job's one process is gone: nothing runs
            return Size(0, 0)
        return Size(alive, self.size.ps if alive else 0)

    def apply(self, size: Size) -> Size:
        if size == self.current():
            return size
        before = self.current()
        self.stop()
        self._start(size)
        log.info(
            "local workers of %s: %s -> %s (pids %s)",
            self.job,
            before,
            size,
            [p.pid for p in self.procs],
        )
        return size

    def close(self) -> None:
        self.stop()
        _OPEN.discard(self)

    # -- processes -----------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _start(self, size: Size) -> None:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(1 if self.per_job else size.workers):
            env = {
                **os.environ,
                **self.env,
                "KALE_WORKER_INDEX": str(i),
                "KALE_WORKERS": str(size.workers),
                "KALE_PS": str(size.ps),
                "KALE_JOB": self.job,
            }
            out: IO[bytes] | int = subprocess.DEVNULL
            if self.log_dir is not None:
                out = open(self.log_dir / f"{self.job}-worker-{i}.log", "ab")  # noqa: SIM115
                self._logs.append(out)
            try:
                proc = subprocess.Popen(
                    render(self.command, index=i, size=size, job=self.job),
                    cwd=self.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,  # prctl only, safe before exec
                )
            except OSError as exc:
                self.stop()
                raise TargetRejected(
                    f"{self.job}: cannot start {self.command[0]!r}: {exc}"
                ) from exc
            self.procs.append(proc)
        self.size = size

    def stop(self) -> None:
        """SIGTERM every worker's group (``per_job``: the job's process only, which stops its
        own), SIGKILL what is left in the groups after ``grace_s``; reap all.

        Exited workers are left unreaped (zombies) until their group has been SIGKILLed, so
        their pid, which names the group, cannot be reused by an unrelated process meanwhile.
        """
        procs, self.procs = self.procs, []
        for p in procs:
            if not _exited(p):
                if self.per_job:
                    # The job's process stops its own workers and PS in order (drain,
                    # checkpoint); a signal to the whole group would kill its helpers
                    # (e.g. a multiprocessing forkserver) under it first.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGTERM)
                else:
                    _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while any(not _exited(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.01)
        for p in procs:
            if not _exited(p):
                log.warning(
                    "worker %d of %s ignored SIGTERM for %.1fs: SIGKILL",
                    p.pid,
                    self.job,
                    self.grace_s,
                )
            if p.returncode is None:  # alive or a zombie: the group id is still ours
                _signal_group(p, signal.SIGKILL)  # also reaches children left behind
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        for f in self._logs:
            f.close()
        self._logs = []
        self.size = Size(0, 0)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process has exited, without reaping it."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == proc.pid


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


@atexit.register
def _close_all() -> None:  # pragma: no cover - interpreter exit
    for act in list(_OPEN):
        with contextlib.suppress(Exception):
            act.close()
