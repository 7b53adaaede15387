"""How a long command is going: a live line on a terminal, sparse lines in a log.

Long commands (``kvprobe check`` on a large config, ``kvprobe conform``,
the soak and the benchmark runner) call :meth:`Progress.show` as they go.
On a terminal the line is redrawn in place at most a few times a second.
When the stream is not a terminal (CI logs, pipes) nothing is written by
default, so logs hold only the results; a command that may run for minutes
(``kvprobe check``) asks for a *log* instead (``log_every_s``): a plain line
at most every ``log_every_s`` seconds, each starting with the time since
the start, so that a 10-minute run in CI is visibly alive.  There
:meth:`Progress.note` writes the start and end lines, and
:meth:`Progress.heartbeat` repeats the latest status while the command
reports nothing new.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Redraws one status line on ``stream`` if it is a terminal; else logs sparse lines or does nothing.

    Args:
        stream: where to write (a terminal gets the live line).
        interval_s: the least time between two redraws of the live line.
        enabled: force the live line on or off (default: on if ``stream``
            is a terminal).
        log_every_s: when there is no live line, write a plain line at most
            this often (None: write nothing).
        clock: the time source (seconds), for tests.

    Never raises for a closed or broken stream: progress is decoration, and
    losing it must not end the command.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        interval_s: float = 0.2,
        enabled: bool | None = None,
        log_every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if log_every_s is not None and log_every_s <= 0:
            raise ValueError(f"log_every_s must be positive, got {log_every_s}")
        self.stream = stream
        if enabled is None:
            isatty = getattr(stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.logging = not enabled and log_every_s is not None
        self.interval_s = interval_s
        self.log_every_s = log_every_s
        self._clock = clock
        self._started = clock()
        self._last = 0.0
        self._logged = self._started
        self._latest: str | None = None
        self._shown = False
        self._lock = threading.Lock()

    def show(self, text: str, *, force: bool = False) -> None:
        """Report ``text`` as the current status.

        Live: replace the status line (at most every ``interval_s`` unless
        ``force``).  Log: write it as a line if ``log_every_s`` has passed
        since the last line (``force`` does not hurry a log).
        """
        if self.logging:
            with self._lock:
                self._latest = text
            self.tick()
            return
        if not self.enabled:
            return
        now = self._clock()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        self._write(f"\r\x1b[K{text}")
        self._shown = True

    def note(self, text: str) -> None:
        """Log mode only: write ``text`` as a line now (a start or an end line)."""
        if self.logging:
            with self._lock:
                self._log(text)

    def tick(self) -> None:
        """Log mode: write the latest status again if ``log_every_s`` has passed since the last line."""
        if not self.logging or self._latest is None:
            return
        with self._lock:
            assert self.log_every_s is not None
            if self._clock() - self._logged >= self.log_every_s:
                self._log(self._latest)

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Log mode: while the block runs, repeat the latest status every ``log_every_s`` (a daemon thread)."""
        if not self.logging:
            yield
            return
        assert self.log_every_s is not None
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(min(1.0, self.log_every_s or 1.0)):
                self.tick()

        thread = threading.Thread(target=beat, name="kvprobe-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def clear(self) -> None:
        """Erase the status line (call before printing results)."""
        if self.enabled and self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _log(self, text: str) -> None:
        now = self._clock()
        self._logged = now
        self._write(f"[{_elapsed(now - self._started)}] {text}\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: drop the display
            self.enabled = False
            self.logging = False


def _elapsed(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``: the time since the start, as a log line begins."""
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"
