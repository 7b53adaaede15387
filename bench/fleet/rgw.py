"""A fleet on a real store: engine processes sharing one bucket on Ceph RGW, HEADs capped at a partition-like rate.

Issue 27's measurement, made reproducible (loopback only, every process
stopped by its pid):

* a single-node Ceph cluster and its RADOS Gateway
  (:class:`kvprobe.testing.rgw.RgwServer`) holding a pool of prompts of
  ``CHAIN`` (64) blocks, each with a stored prefix of 0 to 64 blocks drawn
  uniformly (PUT straight to the gateway);
* in front of it, :class:`kvprobe.testing.faultproxy.FaultProxy` with a HEAD
  rate cap (a token bucket shared by every connection, ``503 SlowDown``
  without body beyond it): a prefix's request limit, as S3 and RGW's own
  rate limits enforce it.  The proxy counts the HEADs the fleet sent;
* ``--engines`` engine processes (:mod:`bench.fleet.rgw_engine`), each an
  ``AsyncLookupManager`` over a ``NixlObjBackend`` on the proxy with the
  library's defaults (``lookup_chain`` in the object tier's windows, 4
  growing by 1.25; pacing on, one pace for the host's engines) and
  one chain mode per run (``--chain-modes``: ``exact``, the library's
  default, and the opt-in ``inferred`` search, valid here because the store
  is filled prefix-closed), receiving Poisson arrivals of ``--rate`` requests per second for
  ``--duration`` seconds, each request's chain looked up step by step until
  decided or its ``--deadline``.

Per seed it reports: the stored prefixes **found** (requests whose decided
``leading_hits`` equals the stored prefix), **HEADs per request** against
the exact ideal (hits plus the first miss), the **throttled** fraction of
HEADs (503s at the proxy over HEADs at the proxy), the requests **decided**
within their deadline, **wrong** verdicts (a decided ``leading_hits`` longer
than the stored prefix: an absent block answered True), the engines' **exit**
codes and their **stderr** lines; and each engine's pace at the end.  Every
mode runs every seed in the same run, one after the other on the same plans
behind the same cap, and is reported apart (the inferred mode's verdicts are
checked against the stored prefixes like the exact mode's; its HEADs are the
ones the proxy saw, and its probes the backends' ``keys`` counter, not the
keys it answered stored by inference).

The figures and the tables are :mod:`bench.fleet.rgw_report`'s.
``python -m bench.fleet.rgw`` prints the tables and writes
``bench/results/fleet_rgw.json`` (untracked); ``--update-docs`` writes
``docs/data/fleet_rgw.json`` and the tables ``docs/performance.md`` quotes from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import DOCS_DIR, RESULTS_DIR, load_average, machine
from bench.docdata import DATA_DIR, dumps, requote
from bench.fleet.rgw_engine import CHAIN, prompt_keys
from bench.fleet.rgw_report import comparison, markdown, mode_tables, schedule_label, seed_figures
from kvprobe.backends.nixl_obj import NixlObjBackend
from kvprobe.backends.obj_parts import PACE_SCOPES
from kvprobe.statemachine.inferred import CHAIN_MODES, EXACT
from kvprobe.statemachine.types import KvprobeError
from kvprobe.statemachine.windows import (
    ALL,
    chain_window_size,
    window_growth,
)

__all__ = ["Setup", "engine_plans", "fill_store", "main", "measure", "run_seed", "stored_prefixes"]

BUCKET = "fleet"
DOC = DOCS_DIR / "performance.md"
DOCS_JSON = DATA_DIR / "fleet_rgw.json"
#: Where the engine processes run (``python -m bench.fleet.rgw_engine`` must import from there).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: The control run's cap: far above what the fleet can send here.
UNCAPPED = 1e6


@dataclass(frozen=True)
class Setup:
    """One fleet run's shape (the defaults are the bench's; the test runs a smaller one).

    Raises:
        ValueError: a count or a duration out of its range (named in the message).
    """

    engines: int = 4
    rate: float = 2.0  # requests per second per engine
    duration_s: float = 12.0  # seconds of arrivals
    deadline_s: float = 5.0
    step_s: float = 0.03
    head_rate: float = 400.0  # the store's HEAD cap (HEAD/s), all engines together
    head_burst: float | None = None  # the cap's depth (HEADs); None: a tenth of a second of head_rate
    pool: int = 160  # prompts stored
    engine_timeout_s: float = 90.0  # an engine slower than duration + deadline + this is killed
    chain_window: int = NixlObjBackend.chain_schedule[0]  # the engines' first window (exact mode): the tier's
    chain_growth: float = NixlObjBackend.chain_schedule[1]  # how their windows grow (chain_window_growth)
    pace_scope: str = "host"  # who shares a store's pace: the host's engine processes (the default), or each alone
    start_backlog: int | None = None  # lookup_chain's start rule: None, the backend's; 0, off

    def cap(self) -> dict[str, float]:
        """The proxy's cap settings."""
        return {"head_rate": self.head_rate} | ({} if self.head_burst is None else {"head_burst": self.head_burst})

    def __post_init__(self) -> None:
        if not 1 <= self.engines <= 16:
            raise ValueError(f"engines must be in [1, 16], got {self.engines!r}")
        if not 0 < self.head_rate <= 1e6:
            raise ValueError(f"head_rate must be in (0, 1e6] HEADs per second, got {self.head_rate!r}")
        for name in ("rate", "duration_s", "deadline_s", "step_s", "engine_timeout_s"):
            value = getattr(self, name)
            if not 0 < value <= 3600:
                raise ValueError(f"{name} must be in (0, 3600], got {value!r}")
        if self.duration_s > 120:
            raise ValueError(f"duration_s is bounded at 120 s, got {self.duration_s!r}")
        try:
            chain_window_size(self.chain_window)
            window_growth(self.chain_growth)
        except KvprobeError as exc:
            raise ValueError(f"the engines' manager would refuse it: {exc}") from exc
        if self.pace_scope not in PACE_SCOPES:
            raise ValueError(f"pace_scope must be one of {PACE_SCOPES}, got {self.pace_scope!r}")
        if self.start_backlog is not None and not 0 <= self.start_backlog <= 1000:
            raise ValueError(f"start_backlog must be in [0, 1000], got {self.start_backlog!r}")
        if self.chain_window == ALL:
            raise ValueError("chain_window must be a first window of keys ('all' is not measured here)")


def stored_prefixes(pool: int) -> list[int]:
    """The stored prefix of each pool prompt: 0 to ``CHAIN`` blocks, uniform (fixed: the store is filled once)."""
    rng = random.Random(27)
    return [rng.randint(0, CHAIN) for _ in range(pool)]


def engine_plans(setup: Setup, seed: int, stored: Sequence[int]) -> list[list[list[float]]]:
    """Each engine's requests ``[arrival_s, prompt, stored]``: Poisson arrivals, prompts dealt without repeat.

    Raises:
        ValueError: the pool holds fewer prompts than the arrivals drawn.
    """
    rng = random.Random(seed)
    order = list(range(len(stored)))
    rng.shuffle(order)
    plans: list[list[list[float]]] = []
    for _ in range(setup.engines):
        plan, t = [], rng.expovariate(setup.rate)
        while t < setup.duration_s:
            if not order:
                raise ValueError(f"a pool of {len(stored)} prompts is too small for {setup} (seed {seed})")
            prompt = order.pop()
            plan.append([round(t, 4), prompt, stored[prompt]])
            t += rng.expovariate(setup.rate)
        plans.append(plan)
    return plans


def fill_store(server: Any, bucket: str, stored: Sequence[int]) -> int:
    """PUT every stored block of the pool straight to the gateway; how many.

    Raises:
        botocore.exceptions.BotoCoreError / ClientError: a PUT failed.
    """
    from kvprobe.backends.layout import relative_name

    client = server.client()
    names = [relative_name(k) for prompt, n in enumerate(stored) for k in prompt_keys(prompt)[:n]]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: client.put_object(Bucket=bucket, Key=name, Body=b"block"), names))
    return len(names)


@dataclass
class _Engine:
    proc: subprocess.Popen[str]
    stderr_path: str
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def start_reader(self) -> None:
        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()


def _spawn(plan: dict[str, Any], workdir: str) -> _Engine:
    path = os.path.join(workdir, f"engine-{plan['engine']}.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    err = os.path.join(workdir, f"engine-{plan['engine']}.stderr")
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.fleet.rgw_engine", path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            cwd=REPO_ROOT, start_new_session=True,
            env=os.environ | {"KVPROBE_PACE_DIR": workdir},  # a host pace's file goes with the seed's engines
        )  # fmt: skip
    engine = _Engine(proc, err)
    engine.start_reader()
    return engine


def _wait_until(check: Any, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def run_seed(
    setup: Setup,
    seed: int,
    server: Any,
    proxy: Any,
    stored: Sequence[int],
    bucket: str = BUCKET,
    chain_mode: str = EXACT,
) -> dict[str, Any]:
    """Start the engines in ``chain_mode``, let them serve one seed's arrivals, stop them; the raw outcome of each.

    Raises:
        RuntimeError: an engine did not get ready within ``engine_timeout_s`` (every engine is killed;
            an engine refusing ``chain_mode`` never gets ready).
    """
    creds = server.credentials()
    base = {"bucket": bucket, "endpoint_url": proxy.endpoint_url, "deadline_s": setup.deadline_s}
    base |= {"chain_mode": chain_mode, "chain_window": setup.chain_window, "chain_window_growth": setup.chain_growth}
    base |= {"step_s": setup.step_s, "access_key": creds["access_key"], "secret_key": creds["secret_key"]}
    base |= {"pace_scope": setup.pace_scope}
    if setup.start_backlog is not None:
        base |= {"start_backlog": setup.start_backlog}
    plans = engine_plans(setup, seed, stored)
    # Uncapped while the engines start: each backend checks its store once at construction, and
    # that check is not what is measured (an engine refused there never serves a request).
    proxy.configure(head_rate=UNCAPPED)
    with tempfile.TemporaryDirectory(prefix="kvprobe-fleet-rgw-") as workdir:
        engines = [_spawn({**base, "engine": i, "requests": plan}, workdir) for i, plan in enumerate(plans)]
        try:
            ready = _wait_until(lambda: all(e.lines or e.proc.poll() is not None for e in engines), 60.0)
            if not ready or any(e.lines[:1] != ["ready\n"] for e in engines):
                said = [(e.lines[:1], Path(e.stderr_path).read_text().splitlines()[-3:]) for e in engines]
                raise RuntimeError(f"seed {seed}, {chain_mode}: not every engine got ready (stdout, stderr): {said}")
            proxy.configure(**setup.cap())  # counts from here, with a full bucket
            for e in engines:
                assert e.proc.stdin is not None
                e.proc.stdin.write("go\n")
                e.proc.stdin.flush()
            limit = setup.duration_s + setup.deadline_s + setup.engine_timeout_s
            _wait_until(lambda: all(e.proc.poll() is not None for e in engines), limit)
        finally:
            killed = [e.proc.pid for e in engines if e.proc.poll() is None]
            for e in engines:
                if e.proc.poll() is None:
                    e.proc.kill()  # by its pid
                e.proc.wait(30)
        proxy_stats = proxy.stats()
        runs = []
        for e in engines:
            if e.reader is not None:
                e.reader.join(10)
            with open(e.stderr_path) as f:
                stderr = f.read().splitlines()
            result = json.loads(e.lines[-1]) if len(e.lines) > 1 else None
            runs.append({"exit": e.proc.returncode, "stderr_lines": len(stderr), "stderr_head": stderr[:5]} | {
                "killed": e.proc.pid in killed, "result": result})  # fmt: skip
    requests = sum(len(p) for p in plans)
    return {"seed": seed, "chain_mode": chain_mode, "proxy": proxy_stats, "engines": runs, "requests": requests}


def measure(
    setup: Setup,
    seeds: Sequence[int],
    server: Any = None,
    bucket: str = BUCKET,
    *,
    control: bool = False,
    chain_modes: Sequence[str] = (EXACT,),
    schedules: Sequence[tuple[int, float, str]] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Fill the store, put the capped proxy in front, run every seed in every chain mode; (figures, raw outcomes).

    Seed by seed, each of ``chain_modes`` in turn runs the same plans behind
    the same cap (so a drift of the machine's load falls on every mode), one
    entry per (seed, mode) in both lists, in that order; each figure names
    its ``chain_mode``.  ``control``: then run the first seed once more in
    each mode with no cap to speak of (:data:`UNCAPPED` HEAD/s), last in both
    lists: what the same fleet finds when the store never throttles.
    ``schedules``: more schedules ``(chain_window, chain_window_growth,
    pace_scope)`` for the exact walk, each run after the modes on every seed
    (a figure's ``schedule`` names its own).

    ``server``: a started RGW (or any S3 server with ``credentials``, ``client``
    and ``create_bucket``) to use; None boots a :class:`~kvprobe.testing.rgw.RgwServer`
    for the run and stops it (by its pids) after.

    Raises:
        S3ServerError: Ceph RGW is missing or did not start (nothing is left running).
        RuntimeError: an engine did not get ready.
        ValueError: ``chain_modes`` is empty or names a mode other than ``"exact"`` and ``"inferred"``,
            or a schedule is one the manager would refuse (both before a store is started).
    """
    from kvprobe.testing.faultproxy import FaultProxy
    from kvprobe.testing.rgw import RgwServer

    bad = [mode for mode in chain_modes if mode not in CHAIN_MODES]
    if bad or not chain_modes:
        raise ValueError(f"chain_modes must be some of {CHAIN_MODES}, got {list(chain_modes)!r}")
    shapes = [dataclasses.replace(setup, chain_window=w, chain_growth=g, pace_scope=p) for w, g, p in schedules]
    if server is None:
        with RgwServer() as own:
            return measure(setup, seeds, own, bucket, control=control, chain_modes=chain_modes, schedules=schedules)
    stored = stored_prefixes(setup.pool)
    figures, raws = [], []
    if bucket not in getattr(server, "buckets", ()):
        server.create_bucket(bucket)
    blocks = fill_store(server, bucket, stored)
    print(f"{blocks:,} blocks of {setup.pool} prompts stored", file=sys.stderr, flush=True)
    # Seed by seed: each mode on the engines' schedule, then the exact walk on each other schedule.
    walks = [(mode, setup) for mode in chain_modes] + [(EXACT, shape) for shape in shapes]
    runs = [(seed, mode, shape) for seed in seeds for mode, shape in walks]
    uncapped = dataclasses.replace(setup, head_rate=UNCAPPED, head_burst=None)
    runs += [(seeds[0], mode, uncapped) for mode in chain_modes] if control else []
    with FaultProxy(server.endpoint_url, **setup.cap()) as proxy:
        for seed, mode, shape in runs:
            started = time.monotonic()
            raw = run_seed(shape, seed, server, proxy, stored, bucket, mode)
            raws.append(raw)
            figures.append(seed_figures(raw, shape))
            walk = mode if shape in (setup, uncapped) else f"{mode}, {schedule_label(*figures[-1]['schedule'])}"
            print(f"seed {seed}, {walk}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return figures, raws


def _schedule(text: str) -> tuple[int, float, str | None]:
    """``WINDOW:GROWTH[:SCOPE]`` (``--schedules``) as ``(chain_window, chain_window_growth, pace_scope)``.

    A schedule naming no scope has None there (the engines' ``--pace-scope``).

    Raises:
        argparse.ArgumentTypeError: not an int and a number, and maybe a scope, separated by colons.
    """
    parts = text.split(":")
    try:
        if len(parts) in (2, 3) and (len(parts) == 2 or parts[2] in PACE_SCOPES):
            return int(parts[0]), float(parts[1]), parts[2] if len(parts) == 3 else None
    except ValueError:
        pass
    scopes = "|".join(PACE_SCOPES)
    raise argparse.ArgumentTypeError(f"a schedule is WINDOW:GROWTH[:{scopes}], such as 4:1.25:host, got {text!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Setup()
    parser.add_argument("--engines", type=int, default=defaults.engines, help="engine processes (1-16)")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="requests per second per engine")
    parser.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of arrivals")
    parser.add_argument("--deadline", type=float, default=defaults.deadline_s, help="seconds per request")
    parser.add_argument("--head-rate", type=float, default=defaults.head_rate, help="the store's HEAD cap (HEAD/s)")
    parser.add_argument("--head-burst", type=float, default=None, help="the cap's depth (HEADs; default 0.1 s)")
    parser.add_argument("--pool", type=int, default=defaults.pool, help="prompts stored")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--chain-modes", nargs="+", choices=CHAIN_MODES, default=list(CHAIN_MODES),
        help="lookup_chain's modes, each run on every seed (default: both)",
    )  # fmt: skip
    parser.add_argument(
        "--chain-window", type=int, default=defaults.chain_window, help="the engines' chain_window (first window)"
    )
    parser.add_argument(
        "--chain-growth", type=float, default=defaults.chain_growth, help="the engines' chain_window_growth"
    )
    parser.add_argument(
        "--pace-scope", choices=PACE_SCOPES, default=defaults.pace_scope,
        help="the engines' pace_scope: each process paces alone, or the host's processes share one pace",
    )  # fmt: skip
    parser.add_argument(
        "--start-backlog", type=int, default=None, metavar="N",
        help="the engines' start_backlog (lookup_chain's start rule; default: the object tier's, 0: off)",
    )  # fmt: skip
    parser.add_argument(
        "--schedules", type=_schedule, nargs="+", default=[], metavar="WINDOW:GROWTH[:SCOPE]",
        help="more schedules (and pace scopes) for the exact walk, each run on every seed, compared side by side "
        "(e.g. 1:1.25 4:1.25:host)",
    )  # fmt: skip
    parser.add_argument(
        "--no-control", dest="control", action="store_false", help="skip the control run (the first seed uncapped)"
    )
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "fleet_rgw.json")
    parser.add_argument("--update-docs", action="store_true", help=f"also write {DOCS_JSON} and {DOC.name}'s tables")
    args = parser.parse_args(argv)
    try:
        setup = Setup(
            args.engines, args.rate, args.duration, args.deadline, head_rate=args.head_rate,
            head_burst=args.head_burst, pool=args.pool, chain_window=args.chain_window, chain_growth=args.chain_growth,
            pace_scope=args.pace_scope, start_backlog=args.start_backlog,
        )  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    own = (setup.chain_window, setup.chain_growth, setup.pace_scope)
    schedules = list(dict.fromkeys((w, g, p or setup.pace_scope) for w, g, p in args.schedules))
    for first, growth, scope in schedules:
        if (first, growth, scope) == own:
            parser.error(f"--schedules {first}:{growth:g}:{scope} is the engines' own (--chain-window, --chain-growth)")
        try:
            dataclasses.replace(setup, chain_window=first, chain_growth=growth)
        except ValueError as exc:
            parser.error(f"--schedules {first}:{growth:g}: {exc}")
    if schedules and EXACT not in args.chain_modes:
        parser.error("--schedules compares exact walks: --chain-modes must include exact")
    from kvprobe.backends.obj_parts import nixl_unavailable
    from kvprobe.testing.rgw import rgw_missing

    why = rgw_missing() or nixl_unavailable()
    if why is not None:
        print(f"bench.fleet.rgw cannot run here: {why}", file=sys.stderr)
        return 2
    logging.disable(logging.INFO)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start, clock = load_average(), time.monotonic()
    modes = list(dict.fromkeys(args.chain_modes))
    figures, raws = measure(setup, args.seeds, control=args.control, chain_modes=modes, schedules=schedules)
    controls = {f["chain_mode"]: f for f in figures[len(figures) - len(modes) :]} if args.control else {}
    figures = figures[: len(figures) - len(controls)]
    by_mode = {mode: [f for f in figures if f["chain_mode"] == mode and f["schedule"] == [*own]] for mode in modes}
    by_schedule = {schedule_label(*own): by_mode.get(EXACT, [])}
    by_schedule |= {schedule_label(*s): [f for f in figures if f["schedule"] == [*s]] for s in schedules}
    wall, load = time.monotonic() - clock, load_average()
    cmd = " ".join(["python -m bench.fleet.rgw", *(argv if argv is not None else sys.argv[1:])])
    cmd = cmd.replace(" --update-docs", "")
    where = {
        **machine(),
        "load": f"{load_start[0]} at the start, {load[0]} at the end" if load and load_start else "not recorded",
    }
    data = {
        "title": "A fleet on Ceph RGW with a HEAD cap",
        "date": f"{started:%Y-%m-%d %H:%M} UTC",
        "machine": where,
        "command": cmd,
        "note": f"seeds {', '.join(map(str, args.seeds))}, chain modes {', '.join(modes)}, {wall:.0f} s",
        "source": "written by python -m bench.fleet.rgw --update-docs",
        "setup": setup.__dict__,
        "chain_modes": modes,
        "tables": mode_tables(by_mode, controls) | ({"schedules": comparison(by_schedule)} if schedules else {}),
    }
    results = {"figures": by_mode.get(EXACT, []), "control": controls.get(EXACT)}  # exact mode's, as before modes
    results |= {"figures_by_mode": by_mode, "control_by_mode": controls, "raw": raws}
    results |= {"figures_by_schedule": by_schedule} if schedules else {}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**data, **results}) + "\n")
    print(
        f"{setup.engines} engines x {setup.rate:g} requests/s for {setup.duration_s:g} s, chains of {CHAIN} blocks, "
        f"deadline {setup.deadline_s:g} s; windows: first {setup.chain_window}, growth {setup.chain_growth:g}; "
        f"store capped at {setup.head_rate:g} HEAD/s "
        f"({figures[0]['head_burst']:g} deep); {wall:.0f} s; "
        f"raw outcomes in {args.json}\n"
    )
    print("\n\n".join(markdown(table) for table in data["tables"].values()))
    if args.update_docs:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        DOCS_JSON.write_text(dumps(data))
        missing = requote(DOC, DOCS_JSON.stem, data)
        print(f"\nwritten: {DOCS_JSON}" + (f"; docs/performance.md does not quote {missing}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
