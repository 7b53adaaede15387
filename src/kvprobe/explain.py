"""TLC's counterexample in plain words: one line per step, then what went wrong.

``kvprobe check`` prints this for a counterexample (``--raw`` adds TLC's own form after it).
TLC names the action of each step but not its arguments, so each action's
line is worked out from what the step changed (the request whose waiters
grew is the one that looked up, the outcome that left the result queue is
the one drained, ...).

Theory of operation: everything that depends on the model's variables and
actions lives in three tables, so a change of ``tla/KVProbe.tla`` is a table
edit, and anything the tables do not know is shown plainly, never an error:

* :data:`VARIABLES` (``explain_steps``): variable -> how to show its value
  (or None: a bookkeeping or history variable the reader does not need per
  step);
* :data:`ACTIONS` (``explain_steps``): action -> a function of (state
  before, state after) that says what happened with its arguments; an
  unknown action, or one whose function cannot read the states, is shown
  as its name and the variables it changed;
* :data:`VIOLATIONS` (``explain_violations``): property -> a function of
  the last states that says what went wrong in words; an unknown property
  gets a generic sentence.

This module is the rendering: it applies the tables and owns the fallbacks.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvprobe.explain_steps import ACTIONS, VARIABLES, State, plain
from kvprobe.explain_violations import VIOLATIONS
from kvprobe.tlc import Step, TlaValue, parse_value

__all__ = ["ACTIONS", "VARIABLES", "VIOLATIONS", "explain"]


# --- putting it together -----------------------------------------------------


def _parsed(step: Step) -> dict[str, TlaValue]:
    out: dict[str, TlaValue] = {}
    for name, text in step.values.items():
        try:
            out[name] = parse_value(text)
        except (ValueError, IndexError, KeyError):
            out[name] = text  # shown as TLC printed it
    return out


def _show(name: str, value: TlaValue) -> str:
    shown = VARIABLES.get(name, (name, plain))
    assert shown is not None
    label, how = shown
    try:
        return f"{label}: {how(value)}"
    except (TypeError, KeyError, IndexError, AttributeError, ValueError):
        return f"{label}: {value}"


def _action_line(action: str, before: State, after: State) -> str:
    name = action.split()[0] if action else action
    describe = ACTIONS.get(name)
    if describe is not None:
        try:
            return f"{name}: {describe(before, after)}"
        except (TypeError, KeyError, IndexError, AttributeError, ValueError):
            pass  # the model changed under the table: fall back to the plain form
    changed = sorted(k for k in after if before.get(k) != after.get(k))
    return f"{action} (changed: {', '.join(changed) or 'nothing'})"


def explain(steps: Sequence[Step], violated: str | None) -> str:
    """The counterexample ``steps`` as plain lines, ending with what went wrong.

    ``violated`` is the property TLC reported (an invariant name,
    ``EventuallyReclaimed``, ``"deadlock"``), or None if unknown.  Never
    raises for a step, variable or property it does not know: those are
    shown plainly.
    """
    lines = ["In plain words:"]
    states: list[dict[str, TlaValue]] = []
    before: dict[str, TlaValue] = {}
    for step in steps:
        if not step.values:  # the end of a lasso
            if step.action.startswith("Stuttering"):
                lines.append("  then: nothing happens any more, forever (stuttering)")
            else:
                lines.append(f"  then: {step.action}: the steps from there repeat forever")
            continue
        after = _parsed(step)
        states.append(after)
        if not before:
            lines.append(f"  [{step.number}] {step.action}: the start")
            shown = [n for n in after if VARIABLES.get(n, ()) is not None and _interesting(after[n])]
        else:
            lines.append(f"  [{step.number}] {_action_line(step.action, before, after)}")
            shown = [n for n in after if before.get(n) != after[n] and VARIABLES.get(n, ()) is not None]
        for name in sorted(shown, key=_order):
            lines.append(f"        {_show(name, after[name])}")
        before = after
    if violated is not None and states:
        sentence = VIOLATIONS.get(violated)
        try:
            said = sentence(states) if sentence is not None else f"the property {violated} does not hold"
        except (TypeError, KeyError, IndexError, AttributeError, ValueError):
            said = f"the property {violated} does not hold"
        lines.append(f"What went wrong ({violated}): {said}.")
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    """Variables in the order of :data:`VARIABLES`; unknown ones after, by name."""
    known = list(VARIABLES)
    return (known.index(name), "") if name in known else (len(known), name)


def _interesting(value: TlaValue) -> bool:
    """Worth showing in the first state: not empty, not all-blank per key."""
    if isinstance(value, dict):
        return any(v not in ("ABSENT", "none", 0, frozenset(), ()) for v in value.values())
    return value not in (frozenset(), (), False, 0)
