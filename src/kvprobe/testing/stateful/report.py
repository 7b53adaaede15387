"""A failed run on one screen: what broke, then one numbered line per step.

:func:`failure_report` turns Hypothesis's report of a failing run (the
steps it prints, or the notes on the error) into the report
``kvprobe conform`` prints: keys as ``k1``, ``k2``, ..., the checks after
each step left out, steps that changed nothing left out, the failing step
marked.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvprobe.testing.search import failure_leaves
from kvprobe.testing.stateful.tier import KEYS, short_name

__all__ = ["failure_report", "plural"]


def plural(count: int, noun: str) -> str:
    """``1 step``, ``2 steps``: ``count`` and ``noun``, with an ``s`` unless ``count`` is one."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


#: How many lines of a failure's message the report shows.
MESSAGE_LINES = 12

#: Lines of Hypothesis's report that are not steps of the run.
_NOT_STEPS = ("state.contract()", "state.teardown()")


def failure_report(
    exc: BaseException,
    lines: Sequence[str],
    pool: Sequence[bytes] = KEYS,
    effects: Sequence[bool] | None = None,
    width: int = 1000,
) -> str:
    """A failed run on one screen: what broke, then one numbered line per step.

    Keys of ``pool`` are shown as ``k1``, ``k2``, ...; the checks Hypothesis
    prints after each step are left out; the last step, where the
    implementation (or the tier) and the model disagree, is marked.  Each line
    of an error message is cut to ``width`` characters (a line names the
    part that differs first, so a cut never hides which part).  With ``effects`` (per
    step after the initialize rule, whether it changed the model's tables,
    the tier or the backend calls), steps that changed nothing are left out (the last step is always kept).
    """

    def short(text: str) -> str:
        for key in pool:
            text = text.replace(repr(key), short_name(key, pool)).replace(key.hex(), short_name(key, pool))
        return text

    out: list[str] = []
    for leaf in failure_leaves(exc):
        # A message of several lines (the comparison's: one line per part that
        # differs) is shown whole, line by line, up to MESSAGE_LINES of them.
        lines_of = str(leaf).strip().splitlines() or [type(leaf).__name__]
        shown = [short(text) for text in lines_of[:MESSAGE_LINES]]
        if len(lines_of) > MESSAGE_LINES:
            shown.append(f"(and {plural(len(lines_of) - MESSAGE_LINES, 'more line')})")
        shown = [text if len(text) <= width else text[: width - 3] + "..." for text in shown]
        out.append(f"  {type(leaf).__name__}: {shown[0]}")
        out.extend(f"    {text}" for text in shown[1:])
    # The steps come through the reporter or, in recent Hypothesis, as notes on the error.
    notes = [note for leaf in failure_leaves(exc) for note in getattr(leaf, "__notes__", [])]
    texts = [line for text in (*lines, *notes) for line in str(text).splitlines()]
    steps: list[str] = []
    continued = False  # Hypothesis wraps a long step over several lines: join them
    for line in texts:
        text = line.strip()
        if text.startswith("state."):
            steps.append(short(text.removeprefix("state.")))
            continued = not text.endswith(")")
        elif continued and steps and text:
            joiner = "" if steps[-1].endswith(("(", "[", "{")) else " "
            steps[-1] += joiner + short(text)
            continued = not text.endswith(")") or text.count("(") < text.count(")") - 1
    steps = [line for line in steps if f"state.{line}" not in _NOT_STEPS]
    keys = ", ".join(f"{short_name(k, pool)} = {k.hex()}" for k in pool)
    numbered = list(enumerate(steps, 1))
    if effects is not None:
        # effects[0] is the first step after the initialize rule (step 1, always shown).
        numbered = [(n, step) for n, step in numbered if n in (1, len(steps)) or effects[n - 2 : n - 1] != [False]]
    idle = len(steps) - len(numbered)
    left_out = f"; {plural(idle, 'step')} that changed nothing left out" if idle else ""
    out.append(f"The run ({plural(len(steps), 'step')}{left_out}; keys {keys}):")
    for number, step in numbered:
        marker = "   <- fails here" if number == len(steps) else ""
        out.append(f"  {number:>2}. {step}{marker}")
    return "\n".join(out)
