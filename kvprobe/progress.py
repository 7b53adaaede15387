"""A one-line live progress display, shown only on a terminal.

Long commands (``kvprobe check`` on a large config, ``kvprobe conform``,
the soak and the benchmark runner) call :meth:`Progress.show` as they go.
On a terminal the line is redrawn in place at most a few times a second;
when the stream is not a terminal (CI logs, pipes) nothing is written, so
logs hold only the results.
"""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Redraws one status line on ``stream`` if it is a terminal; else does nothing.

    Never raises for a closed or broken stream: progress is decoration, and
    losing it must not end the command.
    """

    def __init__(self, stream: TextIO, *, interval_s: float = 0.2, enabled: bool | None = None) -> None:
        self.stream = stream
        if enabled is None:
            isatty = getattr(stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.interval_s = interval_s
        self._last = 0.0
        self._shown = False

    def show(self, text: str, *, force: bool = False) -> None:
        """Replace the status line with ``text`` (at most every ``interval_s`` unless ``force``)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        self._write(f"\r\x1b[K{text}")
        self._shown = True

    def clear(self) -> None:
        """Erase the status line (call before printing results)."""
        if self.enabled and self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: drop the display
            self.enabled = False
