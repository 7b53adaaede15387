------------------------------ MODULE Trace ------------------------------
(***************************************************************************)
(* Trace validation: is a trace recorded by the implementation a          *)
(* behaviour of KVProbe?                                                   *)
(*                                                                         *)
(* The implementation records its scheduler actions only (NDJSON, schema  *)
(* in statemachine/trace.py); kvprobe.tlc.trace_to_tla writes such a trace *)
(* as the sequence Log in a generated module that extends this one.  Each  *)
(* recorded event must be matched by the KVProbe action of the same name,  *)
(* with the same arguments and the same observable results (verdict and    *)
(* phase of a lookup, the groups of a flush, the outcome a drain applies,  *)
(* the number of states held afterwards, each touched key's state and the *)
(* open groups afterwards).  Worker steps are not recorded:                *)
(* any number of them may happen between two events (existentially).      *)
(*                                                                         *)
(* TraceUnfinished is violated exactly when some behaviour consumes the    *)
(* whole log: a violation means the trace is ACCEPTED.                     *)
(***************************************************************************)
EXTENDS KVProbe, TLC

CONSTANT Log

VARIABLE i   \* the next event of Log to match

TraceInit == Init /\ i = 1

Size(p) == Cardinality({k \in Keys : p[k] # ABSENT})

\* A repeated call that changes nothing (a lookup by a request already
\* waiting, the cleanup of an unknown request, MarkMiss of keys without a
\* state, a flush with an empty batch).
Same == UNCHANGED vars

Matches(e) ==
    CASE e.action = "Lookup" ->
            /\ IF e.req \in waiters[e.key] THEN Same ELSE Lookup(e.key, e.req)
            /\ verdict'[e.key] = e.verdict
            /\ phase'[e.key] = e.phase
      [] e.action = "Flush" ->
            \/ batch = {} /\ e.groups = {} /\ Same
            \/ /\ Flush
               /\ subq' = IF e.groups = {} THEN subq ELSE Append(subq, e.groups)
      [] e.action = "Drain" ->
            /\ resq # <<>>
            /\ Head(resq).grp.probes = e.probes
            /\ Head(resq).kind = e.kind
            /\ Head(resq).ans = e.ans
            /\ Head(resq).late = e.late
            /\ Drain
      [] e.action = "Cleanup" ->
            IF requests[e.req] = {} THEN Same ELSE Cleanup(e.req)
      [] e.action = "MarkMiss" ->
            LET live == {k \in e.keys : Live(k)}
            IN IF live = {} THEN Same ELSE MarkMiss(live)
      [] e.action = "Shutdown" -> Shutdown

\* Worker steps (the worker does not die in a recorded trace: a worker
\* death is not matched yet).
\* The recorded state after the event: every touched key's phase,
\* generation, verdict and waiters, and the open groups.
StateMatches(e) ==
    /\ \A k \in DOMAIN e.after :
          /\ phase'[k] = e.after[k].phase
          /\ gen'[k] = e.after[k].gen
          /\ verdict'[k] = e.after[k].verdict
          /\ waiters'[k] = e.after[k].waiters
    /\ open' = e.open

TraceNext ==
    \/ /\ i <= Len(Log)
       /\ Matches(Log[i])
       /\ StateMatches(Log[i])
       /\ Size(phase') = Log[i].size
       /\ i' = i + 1
    \/ WorkerSteps /\ UNCHANGED i

TraceUnfinished == i <= Len(Log)

=============================================================================
