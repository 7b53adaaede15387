"""Test-only backends that run inside ``ProcessBackend``'s helper processes.

A helper is started with ``spawn``: it unpickles its factory, which imports
this module by name.  That works because the spawned child is given the
parent's ``sys.path``, and pytest put ``tests/faults`` on it when it
imported the tests (rootdir-relative "prepend" import mode).  So everything
here lives at module level and a factory is, for instance,
``functools.partial(ScriptedFsBackend, root, log=path)``.

The parent cannot reach into a helper to switch a fault on, so the keys
name the fault: a group that holds a *marker key* ``b"fault:<mode>"`` or
``b"fault:<mode>:<argument>"`` misbehaves in that mode; a group without
one is answered by ``FsBackend`` honestly.  A test (or a manager's request)
puts the marker among ordinary keys, and the same helper then answers the
next group normally, as the fault matrix's ``Faulty`` wrapper does when
``faulty`` is cleared.

Modes (see :data:`MODES`):

* ``oserror``: raise ``OSError(EIO)``, which pickles and crosses the pipe.
* ``unpicklable``: raise an exception that does not pickle (it holds a lock).
* ``unreadable``: raise an exception that pickles but cannot be rebuilt.
* ``raise_iter``: return a generator that raises while iterated (in the helper).
* ``non_bool``: answer the int ``1`` for the marker key instead of a bool.
* ``short`` / ``long``: one verdict too few / too many.
* ``exit:<code>``: ``os._exit(code)`` mid-call.
* ``sigkill``: the helper sends itself SIGKILL mid-call.
* ``sleep:<seconds>``: sleep, then answer honestly.
* ``spin:<seconds>``: keep a CPU busy that long, then answer honestly.
* ``wait:<path>``: wait until ``path`` exists (at most :data:`WAIT_BOUND_S`),
  then answer honestly; a test releases a stuck call by creating the file.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import cast

from kvprobe.backends import Backend, FsBackend

MARKER = b"fault:"
#: A ``wait`` call gives up after this long, so a test that forgets to
#: release it (or one whose second call wrongly queued behind it) fails
#: instead of hanging.
WAIT_BOUND_S = 30.0


def marker(mode: str, argument: object = None) -> bytes:
    """The marker key that makes its group misbehave in ``mode``."""
    text = mode if argument is None else f"{mode}:{argument}"
    if text.split(":", 1)[0] not in MODES:
        raise ValueError(f"unknown fault mode {mode!r}")
    return MARKER + text.encode()


class UnpicklableError(RuntimeError):
    """Cannot cross a pipe: it carries a lock, and locks do not pickle."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class UnreadableError(RuntimeError):
    """Pickles, but unpickling calls ``cls(*args)`` with one argument and fails."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")


def _raise_while_iterated(verdicts: list[bool]) -> Iterator[bool]:
    yield from verdicts[:1]
    raise ConnectionResetError("connection reset while the result was iterated (injected)")


MODES = (
    "oserror",
    "unpicklable",
    "unreadable",
    "raise_iter",
    "non_bool",
    "short",
    "long",
    "exit",
    "sigkill",
    "sleep",
    "spin",
    "wait",
)


class ScriptedFsBackend:
    """An ``FsBackend`` on ``root`` whose groups misbehave when they hold a marker key.

    Args:
        root: the tier's directory.
        log: if given, every call appends ``"<pid> <number of keys>"`` to this
            file before anything else happens, so a test can tell whether a
            call reached a helper, and which helper it was.
    """

    def __init__(self, root: str | os.PathLike[str], *, log: str | None = None) -> None:
        self.fs = FsBackend(root)
        self.root = self.fs.root
        self.log = log

    def batch_lookup(self, keys: Sequence[bytes], req_context: object) -> Iterable[object]:
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()} {len(keys)}\n")
        found = [(i, k) for i, k in enumerate(keys) if k.startswith(MARKER)]
        if not found:
            return self.fs.batch_lookup(keys, req_context)
        at, key = found[0]
        mode, _, argument = key[len(MARKER) :].decode().partition(":")
        if mode == "oserror":
            raise OSError(errno.EIO, "Input/output error (injected)")
        if mode == "unpicklable":
            raise UnpicklableError("this error cannot cross a pipe (injected)")
        if mode == "unreadable":
            raise UnreadableError("lookup", "injected")
        if mode == "exit":
            os._exit(int(argument))
        if mode == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(WAIT_BOUND_S)  # never reached: the signal is not catchable
        if mode == "sleep":
            time.sleep(float(argument))
        if mode == "spin":
            until = time.monotonic() + float(argument)
            while time.monotonic() < until:
                pass
        if mode == "wait":
            deadline = time.monotonic() + WAIT_BOUND_S
            while not os.path.exists(argument) and time.monotonic() < deadline:
                time.sleep(0.005)
        verdicts = self.fs.batch_lookup(keys, req_context)
        if mode == "raise_iter":
            return _raise_while_iterated(verdicts)
        if mode == "non_bool":
            answer: list[object] = list(verdicts)
            answer[at] = 1
            return answer
        if mode == "short":
            return verdicts[:-1]
        if mode == "long":
            return [*verdicts, True]
        return verdicts

    def close(self) -> None:
        self.fs.close()

    def __repr__(self) -> str:
        return f"ScriptedFsBackend({self.root!r})"


class ExitingFactory:
    """A factory whose helper exits with ``code`` before the backend exists."""

    def __init__(self, code: int) -> None:
        self.code = code

    def __call__(self) -> FsBackend:
        os._exit(self.code)


class SlowFactory:
    """A factory that takes ``seconds`` before it builds an ``FsBackend`` on ``root``."""

    def __init__(self, root: str, seconds: float) -> None:
        self.root = root
        self.seconds = seconds

    def __call__(self) -> FsBackend:
        time.sleep(self.seconds)
        return FsBackend(self.root)


class UnpicklableErrorFactory:
    """A factory that raises an exception that cannot be sent back."""

    def __call__(self) -> FsBackend:
        raise UnpicklableError("the factory failed with an error that cannot cross a pipe (injected)")


def scripted_factory(
    root: str | os.PathLike[str], *, log: str | os.PathLike[str] | None = None
) -> Callable[[], Backend]:
    """A picklable factory of :class:`ScriptedFsBackend` for ``ProcessBackend``.

    Typed as a ``Backend`` factory although its backend breaks the protocol
    on purpose (non-bool verdicts, wrong lengths): that is what is tested.
    """
    return cast(
        "Callable[[], Backend]",
        partial(ScriptedFsBackend, os.fspath(root), log=None if log is None else os.fspath(log)),
    )
