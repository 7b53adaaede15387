-------------------------------- MODULE MC --------------------------------
(* Bounds and checking aids for KVProbe; the .cfg files pick the values. *)
EXTENDS KVProbe, TLC

\* Keys and requests are interchangeable model values.  Sound for the
\* invariants only: configs that check EventuallyReclaimed do not use it.
Symmetry == Permutations(Keys) \cup Permutations(Reqs)

\* The chain walk's configs: every key in one chain (in the order CHOOSE
\* picks), and symmetry over requests only (the chain orders the keys).
ChainOfKeys == CHOOSE c \in [1..Cardinality(Keys) -> Keys] : Range(c) = Keys
ReqSymmetry == Permutations(Reqs)
OneKeyWindow == 1
TwoKeyWindow == 2

\* The variables the next steps depend on: the history variables (and the
\* output of the last Lookup) are left out, except deaths, which Die's
\* guard reads.  No action's guard or effect on the other variables reads
\* what is left out, so states with the same view have the same futures;
\* EventuallyReclaimed reads only phase and requests.  Sound for liveness;
\* NOT for the invariants that read history (configs with this VIEW check
\* only TypeOK and EventuallyReclaimed).
LiveView == <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
              wstate, subq, taken, stuck, resq, deaths>>

\* The verdict cache's witness (tests/tla/test_tla_cache.py checks cache.cfg
\* with this invariant alone, which must be violated): some Lookup is served
\* from memory, so CacheProvenance is not checked vacuously.
NeverServedFromMemory == \A p \in Probe : recalled[p] = NoGen

\* The positioned lookups' witness (tests/tla/test_tla_positions.py checks
\* positions.cfg with it alone, which must be violated): some key is
\* deferred, so DeferredServed is not checked vacuously.
NeverDeferred == \A r \in Reqs : deferred[r] = {}


-----------------------------------------------------------------------------
(* Reachability: each property below says an interesting step never       *)
(* happens.  Each must be VIOLATED (config reach.cfg); the counterexample  *)
(* is a witness that the step is reached, so the checks are not vacuous.   *)

Draining == resq # <<>> /\ resq' = Tail(resq) /\ ~down

\* A result resolves an IN_FLIGHT probe.
ResolvedByResult == \E k \in Keys :
    Draining /\ phase[k] = IN_FLIGHT /\ phase'[k] = RESOLVED /\ Head(resq).kind = "ok"
NeverResolvedByResult == [][~ResolvedByResult]_vars

\* A result for an IN_FLIGHT state nobody waits on reclaims it (an orphan).
OrphanReclaimed == \E k \in Keys :
    Draining /\ phase[k] = IN_FLIGHT /\ waiters[k] = {} /\ phase'[k] = ABSENT
NeverOrphanReclaimed == [][~OrphanReclaimed]_vars

\* A request joins an IN_FLIGHT probe that nobody waited on any more.
InFlightReuse == \E k \in Keys :
    phase[k] = IN_FLIGHT /\ waiters[k] = {} /\ phase'[k] = IN_FLIGHT /\ waiters'[k] # {}
NeverInFlightReuse == [][~InFlightReuse]_vars

\* MarkMiss forces MISS on an IN_FLIGHT probe, and that probe's own result
\* later arrives and is dropped.
LateResultAfterForcedMiss == \E k \in Keys :
    /\ Draining /\ phase[k] = RESOLVED /\ forced[k]
    /\ <<k, gen[k]>> \in Head(resq).grp.probes
    /\ verdict'[k] = "miss"
NeverLateResultAfterForcedMiss == [][~LateResultAfterForcedMiss]_vars

\* A timed-out call's late answer arrives and is dropped.
LateAnswerDropped == \E k \in Keys :
    /\ Draining /\ Head(resq).late /\ <<k, gen[k]>> \in Head(resq).grp.probes
    /\ phase'[k] = RESOLVED /\ verdict'[k] = verdict[k]
NeverLateAnswerDropped == [][~LateAnswerDropped]_vars

\* One flush submits two groups (two requests' shares) in one batch.
TwoGroupsInOneBatch == Len(subq') > Len(subq) /\ Cardinality(subq'[Len(subq')]) >= 2
NeverTwoGroupsInOneBatch == [][~TwoGroupsInOneBatch]_vars

\* A group holding two keys is answered with two different verdicts.
TwoKeysAnswered == Len(resq') > Len(resq) /\
    LET o == resq'[Len(resq')] IN
    \E p, q \in o.grp.probes : p # q /\ o.ans[p] # o.ans[q]
NeverTwoKeysAnswered == [][~TwoKeysAnswered]_vars

\* An outcome of an older generation is drained (and dropped) while the
\* key's next generation is IN_FLIGHT.
StaleWhileNextInFlight == \E k \in Keys :
    /\ Draining /\ phase[k] = IN_FLIGHT
    /\ \E p \in Head(resq).grp.probes : p[1] = k /\ p[2] # gen[k]
NeverStaleWhileNextInFlight == [][~StaleWhileNextInFlight]_vars

\* The worker dies with a probe IN_FLIGHT, and the death marker resolves it.
DeathResolves == \E k \in Keys :
    /\ Draining /\ Head(resq).kind = "died"
    /\ phase[k] = IN_FLIGHT /\ phase'[k] \in {RESOLVED, ABSENT}
NeverDeathResolves == [][~DeathResolves]_vars

\* A dead worker is revived and later serves a batch.
RevivedServes == deaths > 0 /\ wstate = UP /\ Len(subq) > 0 /\ Len(subq') < Len(subq)
NeverRevivedServes == [][~RevivedServes]_vars

\* A group is answered SATURATED while a call is stuck.
Saturated == Len(resq') > Len(resq) /\ resq'[Len(resq')].kind = "saturated"
NeverSaturated == [][~Saturated]_vars

\* One MarkMiss forces two keys.
TwoKeysForced == \E k1, k2 \in Keys :
    k1 # k2 /\ ~forced[k1] /\ ~forced[k2] /\ forced'[k1] /\ forced'[k2]
NeverTwoKeysForced == [][~TwoKeysForced]_vars

\* A stopped worker publishes after Shutdown (and nothing applies it).
PublishedAfterShutdown == down /\ Len(resq') > Len(resq)
NeverPublishedAfterShutdown == [][~PublishedAfterShutdown]_vars

\* Issue 29: a group's outcome is applied while a group of the same or an
\* earlier batch is still running (taken, unanswered): a slow group holds
\* back no other.  Without a batch number: a later flush's groups hold only
\* generations above every generation of an earlier flush, so a running
\* group with a generation below one of the applied group's is of its
\* batch or an earlier one, and was running when that outcome was published.
AppliedBesideRunning == \E k \in Keys :
    /\ Draining /\ Head(resq).kind = "ok" /\ ~Head(resq).late
    /\ phase[k] = IN_FLIGHT /\ phase'[k] = RESOLVED
    /\ \E G \in taken : \E p \in G.probes, q \in Head(resq).grp.probes : p[2] < q[2]
NeverAppliedBesideRunning == [][~AppliedBesideRunning]_vars

=============================================================================
