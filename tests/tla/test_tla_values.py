"""Reading what TLC prints: values, states, -tool messages (no TLC run needed)."""

from __future__ import annotations

import pytest

from kvprobe.check import format_trace
from kvprobe.tlc import ModelValue, coverage_line, parse_messages, parse_state, parse_steps, parse_value, read_result


def test_values() -> None:
    assert parse_value('(k1 :> "PENDING" @@ k2 :> "ABSENT")') == {"k1": "PENDING", "k2": "ABSENT"}
    assert parse_value("{<<k1, 1, r1>>}") == frozenset({("k1", 1, "r1")})
    record = parse_value('[grp |-> [req |-> r1, probes |-> {<<k1, 2>>}], late |-> TRUE, ans |-> (<<k1, 2>> :> "hit")]')
    assert record == {"grp": {"req": "r1", "probes": frozenset({("k1", 2)})}, "late": True, "ans": {("k1", 2): "hit"}}
    assert parse_value("<<0, -3>>") == (0, -3)
    assert isinstance(parse_value("r2"), ModelValue)
    assert parse_value('"a \\"quoted\\" word"') == 'a "quoted" word'


@pytest.mark.parametrize("bad", ["{k1,", "[a |-> ]", "<<1 2>>", "k1 :> "])
def test_malformed_values_are_refused(bad: str) -> None:
    with pytest.raises((ValueError, IndexError)):
        parse_value(bad)


def test_state_with_wrapped_lines() -> None:
    state = parse_state('/\\ phase = (k1 :> "PENDING")\n/\\ subq = << {[req |-> r1,\n   probes |-> {<<k1, 1>>}]} >>')
    assert state["subq"] == (frozenset({parse_value("[req |-> r1, probes |-> {<<k1, 1>>}]")}),)


TOOL_OUTPUT = """@!@!@STARTMSG 2110:1 @!@!@
Invariant NothingLeaks is violated.
@!@!@ENDMSG 2110 @!@!@
@!@!@STARTMSG 2217:4 @!@!@
1: <Initial predicate>
/\\ phase = (k1 :> "ABSENT")
/\\ down = FALSE

@!@!@ENDMSG 2217 @!@!@
@!@!@STARTMSG 2217:4 @!@!@
2: <Lookup line 135, col 5 to line 148, col 81 of module KVProbe>
/\\ phase = (k1 :> "PENDING")
/\\ down = FALSE

@!@!@ENDMSG 2217 @!@!@
@!@!@STARTMSG 2122:4 @!@!@
2: Back to state: <Cleanup line 225, col 5 to line 241, col 71 of module KVProbe>

@!@!@ENDMSG 2122 @!@!@
"""


def test_counterexample_shows_only_what_changed() -> None:
    messages = list(parse_messages(TOOL_OUTPUT.splitlines(keepends=True)))
    assert [m.code for m in messages] == [2110, 2217, 2217, 2122]
    steps = parse_steps(messages)
    assert [s.action for s in steps[:2]] == ["Init", "Lookup"]
    text = format_trace(steps)
    assert '  2. Lookup\n       phase = (k1 :> "PENDING")\n' in text
    assert text.count("down = FALSE") == 1  # unchanged in step 2, so shown once
    assert "-> Back to state 2 (via Cleanup)" in text


COVERAGE_OUTPUT = """@!@!@STARTMSG 2773:0 @!@!@
<Init line 149, col 1 to line 149, col 4 of module KVProbe>: 1:1
@!@!@ENDMSG 2773 @!@!@
@!@!@STARTMSG 2772:0 @!@!@
<Lookup line 184, col 1 to line 184, col 12 of module KVProbe>: 7:9
@!@!@ENDMSG 2772 @!@!@
@!@!@STARTMSG 2221:0 @!@!@
  line 185, col 8 to line 185, col 12 of module KVProbe: 340
@!@!@ENDMSG 2221 @!@!@
@!@!@STARTMSG 2772:0 @!@!@
<Drain line 250, col 1 to line 250, col 5 of module KVProbe>: 3:30
@!@!@ENDMSG 2772 @!@!@
@!@!@STARTMSG 2772:0 @!@!@
<Saturate line 400, col 1 to line 400, col 8 of module KVProbe>: 0:0
@!@!@ENDMSG 2772 @!@!@
"""


def test_coverage_is_read_per_action_and_summarised() -> None:
    result = read_result(list(parse_messages(COVERAGE_OUTPUT.splitlines(keepends=True))), 0, 1.0)
    assert result.coverage == {"Init": (1, 1), "Lookup": (7, 9), "Drain": (3, 30), "Saturate": (0, 0)}
    assert coverage_line(result) == "coverage: Drain 30, Lookup 9; never fired: Saturate"
    assert coverage_line(read_result([], 0, 1.0)) == "coverage: no action statistics"
