"""Running TLC on the TLA+ model in ``tla/``.

:func:`run_tlc` runs ``java -cp JAR tlc2.TLC -tool ...`` on a copy of the
model and returns what TLC found (a :class:`TlcResult`); :func:`tla_dir`
finds the model; :func:`config_directives` reads the ``\\* kvprobe:`` lines a
config may hold.  The rest of the TLC layer lives in sibling modules, one
seam each; the public names of the first four are importable from here too:

* :mod:`kvprobe.tlc_java`: the pinned ``tla2tools.jar`` and ``java``;
* :mod:`kvprobe.tlc_output`: TLC's ``-tool`` message protocol, a run's result;
* :mod:`kvprobe.tlc_trace`: recorded traces written as TLA+ modules;
* :mod:`kvprobe.tlc_values`: TLC's values and ``-dump dot`` state graphs;
* :mod:`kvprobe.tlc_mutants`: the model's mutants and how a run selects one;
* :mod:`kvprobe.tlc_classes`, :mod:`kvprobe.tlc_printer`: a shared archive of
  TLC's classes, and its value printer without layout for graph dumps.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kvprobe.spec.actions import CORE_EVENTS, WORKER_EVENTS
from kvprobe.tlc_classes import class_archive
from kvprobe.tlc_java import JAVA_PACKAGE, TLA2TOOLS_SHA256, CheckerMissing, find_jar, find_java
from kvprobe.tlc_output import (
    MSG_PROGRESS,
    MSG_SIM_PROGRESS,
    MSG_STATS,
    Message,
    Step,
    TlcResult,
    coverage_line,
    parse_messages,
    parse_steps,
    read_result,
)
from kvprobe.tlc_printer import plain_printer
from kvprobe.tlc_trace import read_trace, trace_coverage, trace_coverage_line, trace_to_tla
from kvprobe.tlc_values import FrozenDict, ModelValue, TlaValue, parse_state, parse_value, read_state_graph

__all__ = [
    "CORE_EVENTS",
    "JAVA_PACKAGE",
    "MSG_PROGRESS",
    "MSG_SIM_PROGRESS",
    "MSG_STATS",
    "QUICK_JIT",
    "TLA2TOOLS_SHA256",
    "WORKER_EVENTS",
    "CheckerMissing",
    "FrozenDict",
    "Message",
    "ModelValue",
    "Step",
    "TlaValue",
    "TlcResult",
    "config_directives",
    "coverage_line",
    "find_jar",
    "find_java",
    "liveness_args",
    "parse_messages",
    "parse_state",
    "parse_steps",
    "parse_value",
    "read_result",
    "read_state_graph",
    "read_trace",
    "run_tlc",
    "tla_dir",
    "trace_coverage",
    "trace_coverage_line",
    "trace_to_tla",
]


def tla_dir() -> Path:
    """The folder holding ``KVProbe.tla``, ``MC.tla`` and the ``.cfg`` files.

    ``$KVPROBE_TLA_DIR`` wins; then the checkout's own ``tla/`` (this file
    is ``src/kvprobe/tlc.py`` there, reached through the editable install's
    links); then ``tla/`` inside the installed package.

    Raises:
        FileNotFoundError: no such folder holds ``KVProbe.tla``.
    """
    candidates = []
    if os.environ.get("KVPROBE_TLA_DIR"):
        candidates.append(Path(os.environ["KVPROBE_TLA_DIR"]))
    real = Path(__file__).resolve()
    candidates += [real.parents[2] / "tla", Path(__file__).parent / "tla"]
    for folder in candidates:
        if (folder / "KVProbe.tla").is_file():
            return folder
    raise FileNotFoundError(f"no tla/ folder with KVProbe.tla in {', '.join(map(str, candidates))}")


def run_tlc(
    spec: Path,
    config: Path,
    *,
    workers: int = 1,
    extra_args: Sequence[str] = (),
    extra_files: Mapping[str, str] | None = None,
    on_message: Callable[[Message], None] | None = None,
    workdir: Path | None = None,
    coverage: bool = True,
    plain_values: bool = False,
) -> TlcResult:
    """Run TLC on ``spec`` (a root module) with ``config`` and read the result.

    The spec's folder's ``.tla`` files, ``config`` and ``extra_files`` (name
    -> text) are copied into a temporary folder that is also TLC's metadir
    and Java's temp dir, so runs never write into the source tree and
    concurrent runs do not share files.  Deadlock checking stays on (TLC
    2.15's ``-deadlock`` flag would turn it off); temporal properties are
    checked once, at the end (:func:`liveness_args`).  ``on_message`` sees each
    message as TLC prints it (for progress display).  With ``coverage``
    TLC reports how often each action fired (``TlcResult.coverage``); it
    counts as it evaluates, which costs CPU (a fifth to a quarter of a
    liveness run's), so runs that never read the counts leave it off.
    Java maps TLC's classes from a shared archive (:mod:`kvprobe.tlc_classes`),
    written by the first run; it changes how soon TLC starts, not its result.
    With ``plain_values`` TLC prints values without its layout pass
    (:mod:`kvprobe.tlc_printer`; for ``-dump dot`` graphs, whose reader
    ignores layout): the same values, in far less CPU on a large graph.

    Raises:
        CheckerMissing: no java, or no (or a tampered) jar.
    """
    jar = find_jar()
    java = find_java()
    tlc_args, java_options = config_directives(config.read_text())
    printer = plain_printer(java) if plain_values else None
    # The archive records the classpath it was written with: a run with the
    # printer in front neither maps it nor writes it.
    archive = class_archive(java, jar) if printer is None else None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvprobe-tlc-", dir=workdir) as tmp:
        folder = Path(tmp)
        for module in spec.parent.glob("*.tla"):
            shutil.copy(module, folder / module.name)
        for name, text in (extra_files or {}).items():
            (folder / name).write_text(text)
        shutil.copy(config, folder / "run.cfg")
        (folder / "java-tmp").mkdir()
        cmd = [
            java,
            "-XX:+UseParallelGC",
            # A long trace's records nest deeply (a function of many keys is a
            # chain of @@): the default thread stack overflows on a few hundred.
            "-Xss64m",
            f"-Djava.io.tmpdir={folder / 'java-tmp'}",
            *(archive.java_options() if archive is not None else []),
            *java_options,
            "-cp",
            os.pathsep.join([*([str(printer)] if printer is not None else []), str(jar)]),
            "tlc2.TLC",
            "-tool",
            "-workers",
            str(workers),
            "-metadir",
            str(folder / "states"),
            "-config",
            "run.cfg",
            # An interval longer than any run: the report comes once, at the end.
            *(["-coverage", "10000"] if coverage else []),
            *liveness_args([*tlc_args, *extra_args]),
            *tlc_args,
            *extra_args,
            spec.name,
        ]
        proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        messages: list[Message] = []
        try:
            for msg in parse_messages(proc.stdout):
                messages.append(msg)
                if on_message is not None:
                    on_message(msg)
            exit_code = proc.wait()
        finally:
            # Interrupted (Ctrl-C, SIGTERM through kvprobe check): never leave TLC running.
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if archive is not None:
                archive.keep()
    return read_result(messages, exit_code, time.monotonic() - started)


def liveness_args(tlc_args: Sequence[str]) -> list[str]:
    """The TLC arguments saying when a model-checking run checks its temporal properties.

    ``-lncheck final``: once, on the whole state graph, when exploring ends,
    instead of again each time the graph has grown (TLC's default).  TLC
    makes that final check at the end of every run anyway; the periodic
    ones can only report a violation sooner, and they redo their work on an
    ever larger graph.  A simulation (``-simulate`` among ``tlc_args``)
    takes none.
    """
    return [] if "-simulate" in tlc_args else ["-lncheck", "final"]


_DIRECTIVE = re.compile(r"^\\\* kvprobe: (tlc-args|stop-after|jit) (.+)$", re.MULTILINE)
_ALLOWED_TLC_ARGS = {"-simulate", "-depth", "-seed"}

#: The Java option a config's ``\* kvprobe: jit c1`` asks for: the JIT stops at
#: its first compiler (C1).  On a run of under about 50,000 distinct states
#: the optimising compiler (C2) spends more CPU compiling than its code saves
#: (measured: chain-inferred, 10,575 states, 8.9 -> 5.3 CPU s; chain, 23,800,
#: 11.3 -> 10.0; deadlock, 53,871, 16.3 -> 16.5; default, 210,981, 42 -> 58).
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def config_directives(cfg_text: str) -> tuple[list[str], list[str]]:
    """The TLC arguments and Java options a config asks for in comment lines.

    ``\\* kvprobe: tlc-args -simulate -depth 60 -seed 7`` adds those TLC
    arguments (only ``-simulate``, ``-depth`` and ``-seed`` with numbers;
    ``-simulate num=N`` stops a simulation after N behaviours, whatever the
    machine's speed);
    ``\\* kvprobe: stop-after 540`` stops TLC after that many seconds
    (``-Dtlc2.TLC.stopAfter``, which TLC 2.15 honours; it ends a simulation,
    which otherwise never stops).
    ``\\* kvprobe: jit c1`` runs Java with :data:`QUICK_JIT` (the config's
    graph is small: under 50,000 distinct states).

    Raises:
        ValueError: a directive asks for anything else.
    """
    tlc_args: list[str] = []
    java_options: list[str] = []
    for kind, value in _DIRECTIVE.findall(cfg_text):
        words = value.split()
        if kind == "jit":
            if words != ["c1"]:
                raise ValueError(f"jit takes only c1 (the first compiler alone), got {value!r}")
            java_options.append(QUICK_JIT)
            continue
        if kind == "stop-after":
            if len(words) != 1 or not words[0].isdigit():
                raise ValueError(f"stop-after needs a number of seconds, got {value!r}")
            java_options.append(f"-Dtlc2.TLC.stopAfter={int(words[0])}")
            continue
        for before, word in zip(["", *words], words, strict=False):
            behaviours = before == "-simulate" and re.fullmatch(r"num=[1-9]\d*", word) is not None
            if word not in _ALLOWED_TLC_ARGS and not word.isdigit() and not behaviours:
                raise ValueError(
                    f"tlc-args may hold only {sorted(_ALLOWED_TLC_ARGS)}, numbers and -simulate num=N, got {word!r}"
                )
        tlc_args += words
    return tlc_args, java_options
