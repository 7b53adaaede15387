------------------------------ MODULE Trace ------------------------------
(***************************************************************************)
(* Trace validation: is a trace recorded by the implementation a          *)
(* behaviour of KVProbe?                                                   *)
(*                                                                         *)
(* The implementation records the scheduler's actions and the worker's    *)
(* (NDJSON, schema in statemachine/trace.py); kvprobe.tlc.trace_to_tla     *)
(* writes such a trace as the sequence Log in a generated module that      *)
(* extends this one.  Each recorded event must be matched by the KVProbe   *)
(* action of the same name, with the same arguments and the same           *)
(* observable results:                                                     *)
(*  - scheduler events: the verdict and phase of a lookup, the groups of a *)
(*    flush, the outcome a drain applies, the number of states held, each  *)
(*    touched key's state and the open groups afterwards; with the verdict *)
(*    cache on (CacheOn), a lookup served from memory is LookupRecall and  *)
(*    each touched key's remembered answer is the model's (MemoryMatches); *)
(*  - worker events: the group taken or answered and the answer per key,   *)
(*    and, where the worker knows them, the groups it still holds and the  *)
(*    number of its calls stuck past their timeout.                        *)
(* The recorded order is a linearization (statemachine/trace.py says why), *)
(* so no step happens between two events, except when the worker logs     *)
(* nothing at all (WorkerLogged is FALSE, e.g. a third-party worker): then *)
(* any number of worker steps may happen between two events.               *)
(*                                                                         *)
(* A threaded worker also records each backend call's return             *)
(* (CallReturned), apart from its publication.  KVProbe's worker publishes *)
(* a call's answer in the step the call returns, so the return is matched  *)
(* by no model step, and the worker's next event must publish that answer  *)
(* (scheduler events may come between: they cannot see it yet).  A worker *)
(* that holds an answer it has is rejected at its next event.              *)
(*                                                                         *)
(* An exact chain walk (lookup_chain) records its Lookups consecutively,  *)
(* with the key's 0-based index in the chain and the window schedule; each *)
(* must be the walk's next key, allowed by the window rule of KVProbe's    *)
(* ChainStep (ChainNoMissBefore, ChainWindowOpen) read over the keys the   *)
(* walk looked up before it.  A walk past its window is rejected there.    *)
(*                                                                         *)
(* TraceUnfinished is violated exactly when some behaviour consumes the    *)
(* whole log with no returned answer left unpublished: a violation means   *)
(* the trace is ACCEPTED.                                                  *)
(***************************************************************************)
EXTENDS KVProbe, TLC

CONSTANTS
    Log,          \* the recorded events, as records
    WorkerLogged  \* whether the worker's actions are in Log

VARIABLES
    i,         \* the next event of Log to match
    returned,  \* the call returned and not yet published: {} or one [grp, ans, answered]
    walk,      \* the keys the current chain walk looked up, in order
    walkReq    \* the request walking

traceVars == <<i, returned, walk, walkReq>>

TraceInit == Init /\ i = 1 /\ returned = {} /\ walk = <<>> /\ walkReq = "none"

Size(p) == Cardinality({k \in Keys : p[k] # ABSENT})

\* A repeated call that changes nothing (a lookup by a request already
\* waiting, the cleanup of an unknown request, MarkMiss of keys with neither
\* a state nor a remembered answer, a flush with an empty batch).
Same == UNCHANGED vars

\* The events the core logs; the others are the worker's (and Revive, logged by
\* the worker the manager starts again).
CoreEvents == {"Lookup", "Flush", "Drain", "Cleanup", "MarkMiss", "Shutdown"}

\* Flush's owner functions, for the recorded flush only (the config puts this
\* in place of KVProbe's FlushOwners): each submitted entry's owner is the
\* request of the recorded group holding its probe, any other entry's is the
\* request that asked (the only one Flush's guard allows).  Flush's guard
\* still checks them; without this, TLC would enumerate |Reqs|^|entries|.
TraceFlushOwners(entries) ==
    LET groups == Log[i].groups
        Holds(G, x) == <<x[1], x[2]>> \in G.probes
        OwnerOf(x) == IF \E G \in groups : Holds(G, x)
                      THEN (CHOOSE G \in groups : Holds(G, x)).req
                      ELSE x[3]
    IN {[x \in entries |-> OwnerOf(x)]}

Matches(e) ==
    CASE e.action = "Lookup" ->
            \* the code drains before every lookup, a repeated one included
            /\ Drained
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
            \* a key without a state is given too if the model remembers an
            \* answer for it: the cache forgets every key given
            LET marked == {k \in e.keys : Markable(k)}
            IN IF marked = {} THEN Same ELSE MarkMiss(marked)
      [] e.action = "Shutdown" -> Shutdown

\* Where the window holding 1-based position p starts, for a first window of
\* F keys and growth 2: KVProbe's WindowStart, with F a parameter (its
\* FirstWindow and Chain are a config's), by recursion (2^e overflows TLC's
\* integers on a long chain).  The window starting at s ends at 2s - 2 + F.
RECURSIVE WindowStartFrom(_, _, _)
WindowStartFrom(F, s, p) == IF p <= 2 * s - 2 + F THEN s ELSE WindowStartFrom(F, 2 * s - 1 + F, p)

\* The window start of walk event e's key (1 for one window, "all"; the
\* recorded start for a growth other than 2).
EventWindowStart(e) ==
    IF e.first = 0 THEN 1
    ELSE IF e.start > 0 THEN e.start
    ELSE WindowStartFrom(e.first, 1, e.index + 1)

\* Walk event e looks up the walk's next key, as the window rule allows:
\* the keys before it are the ones the walk looked up (in order, none
\* skipped), none is known NOT stored, and each before e's window is known
\* stored (ChainNoMissBefore and ChainWindowOpen over the walk's keys).
\* Any other event ends the walk (its events are consecutive).
WalkMatches(e) ==
    IF e.action = "Lookup" /\ e.walked
    THEN LET before == IF e.index = 0 THEN <<>> ELSE walk
         IN /\ e.index = 0 \/ walkReq = e.req
            /\ Len(before) = e.index
            /\ \A j \in 1..Len(before) : verdict[before[j]] # "miss"
            /\ \A j \in 1..(EventWindowStart(e) - 1) : verdict[before[j]] = "hit"
            /\ walk' = Append(before, e.key)
            /\ walkReq' = e.req
    ELSE walk' = <<>> /\ walkReq' = "none"

\* The verdict cache's entry of key k recorded after an event (CacheOn: the
\* recording has one per touched key, mem "none" for no entry).  KVProbe has
\* no clock: it drops an entry only at MarkMiss, Shutdown and a Lookup that
\* probes the key (LookupNew is allowed whatever is remembered), which
\* stands for every expiry and eviction.  The code also drops an entry when
\* its time is up (found by the key's lookup, which then probes: the same
\* step) or when the bound evicts it, and keeps no answer whose TTL is 0; so
\* a recorded absence says nothing, and a recorded entry must be the
\* model's, answer and generation: an entry the model never made or has
\* forgotten (a failure's MISS, a key MarkMiss was given) is rejected at
\* the event that shows it.
MemoryMatches(k, rec) == rec.mem # "none" => mem'[k] = rec.mem /\ memGen'[k] = rec.memGen

\* The recorded state after a scheduler event: every touched key's phase,
\* generation, verdict, waiters and remembered answer, and the open groups.
StateMatches(e) ==
    /\ \A k \in DOMAIN e.after :
          /\ phase'[k] = e.after[k].phase
          /\ gen'[k] = e.after[k].gen
          /\ verdict'[k] = e.after[k].verdict
          /\ waiters'[k] = e.after[k].waiters
          /\ MemoryMatches(k, e.after[k])
    /\ open' = e.open
    /\ Size(phase') = e.size

\* A worker event: the action of that name on the recorded group and answer.
WorkerMatches(e) ==
    CASE e.action = "TakeBatch" -> subq # <<>> /\ Head(subq) = e.groups /\ TakeBatch
      [] e.action = "CompleteGroup" -> e.grp \in taken /\ CompleteGroupOf(e.grp, e.ans)
      [] e.action = "FailGroup" -> e.grp \in taken /\ FailGroupOf(e.grp)
      [] e.action = "TimeOut" -> e.grp \in taken /\ TimeOutOf(e.grp)
      [] e.action = "Saturate" -> e.grp \in taken /\ SaturateOf(e.grp)
      [] e.action = "LateAnswer" -> e.grp \in stuck /\ LateAnswerOf(e.grp, e.ans)
      [] e.action = "Die" -> Die
      [] e.action = "Revive" -> Revive

\* A call's return: the group's call was running (taken, or stuck for a late
\* answer) and no other returned answer waits; the model does not move.
ReturnMatches(e) ==
    /\ returned = {}
    /\ e.grp \in taken \cup stuck
    /\ UNCHANGED vars
    /\ returned' = {[grp |-> e.grp, ans |-> e.ans, answered |-> e.answered]}

\* Worker event e publishes the returned answer r: the same group, and the
\* answer the call gave (a call that failed is published as FailGroup, or as
\* a late answer of MISS for every key).
Publishes(e, r) ==
    /\ e.grp = r.grp
    /\ \/ e.action = "CompleteGroup" /\ r.answered /\ e.ans = r.ans
       \/ e.action = "FailGroup" /\ ~r.answered
       \/ e.action = "LateAnswer" /\ e.ans = r.ans

\* The worker's own state after the event, where it recorded it.
WorkerStateMatches(e) ==
    /\ e.heldKnown => taken' = e.held
    /\ e.stuckKnown => Cardinality(stuck') = e.stuck

TraceNext ==
    \/ /\ i <= Len(Log)
       /\ Log[i].action \in CoreEvents
       /\ Matches(Log[i])
       /\ StateMatches(Log[i])
       /\ WalkMatches(Log[i])
       /\ i' = i + 1
       /\ UNCHANGED returned
    \/ /\ i <= Len(Log)
       /\ Log[i].action = "CallReturned"
       /\ ReturnMatches(Log[i])
       /\ WorkerStateMatches(Log[i])
       /\ WalkMatches(Log[i])
       /\ i' = i + 1
    \/ /\ i <= Len(Log)
       /\ Log[i].action \notin CoreEvents \cup {"CallReturned"}
       /\ \A r \in returned : Publishes(Log[i], r)
       /\ returned' = {}
       /\ WorkerMatches(Log[i])
       /\ WorkerStateMatches(Log[i])
       /\ WalkMatches(Log[i])
       /\ i' = i + 1
    \/ ~WorkerLogged /\ WorkerSteps /\ UNCHANGED traceVars

TraceUnfinished == i <= Len(Log) \/ returned # {}

=============================================================================
