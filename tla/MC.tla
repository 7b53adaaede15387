-------------------------------- MODULE MC --------------------------------
(* Bounds and checking aids for KVProbe; the .cfg files pick the values. *)
EXTENDS KVProbe, TLC

\* Keys and requests are interchangeable model values.  Sound for the
\* invariants only: configs that check EventuallyReclaimed do not use it.
Symmetry == Permutations(Keys) \cup Permutations(Reqs)

-----------------------------------------------------------------------------
(* Reachability: each property below says an interesting step never       *)
(* happens.  Each must be VIOLATED (config reach.cfg); the counterexample  *)
(* is a witness that the step is reached, so the checks are not vacuous.   *)

\* A result resolves an IN_FLIGHT probe.
ResolvedByResult == \E k \in Keys :
    phase[k] = IN_FLIGHT /\ phase'[k] = RESOLVED /\ Len(applied'[k]) = 1
NeverResolvedByResult == [][~ResolvedByResult]_vars

\* A result for an IN_FLIGHT state nobody waits on reclaims it (an orphan).
OrphanReclaimed == \E k \in Keys :
    phase[k] = IN_FLIGHT /\ waiters[k] = {} /\ phase'[k] = ABSENT /\ resq' # resq
NeverOrphanReclaimed == [][~OrphanReclaimed]_vars

\* A request joins an IN_FLIGHT probe that nobody waited on any more.
InFlightReuse == \E k \in Keys :
    phase[k] = IN_FLIGHT /\ waiters[k] = {} /\ phase'[k] = IN_FLIGHT /\ waiters'[k] # {}
NeverInFlightReuse == [][~InFlightReuse]_vars

\* MarkMiss forces MISS on an IN_FLIGHT probe, and that probe's own result
\* later arrives and is dropped.
LateResultAfterForcedMiss == \E k \in Keys :
    /\ phase[k] = RESOLVED /\ forced[k] /\ resq # <<>>
    /\ <<k, gen[k]>> \in Head(resq).grp.probes
    /\ resq' = Tail(resq) /\ verdict'[k] = "miss"
NeverLateResultAfterForcedMiss == [][~LateResultAfterForcedMiss]_vars

\* A timed-out call's late answer arrives and is dropped.
LateAnswerDropped == \E k \in Keys :
    /\ resq # <<>> /\ Head(resq).late /\ <<k, gen[k]>> \in Head(resq).grp.probes
    /\ resq' = Tail(resq) /\ phase'[k] = RESOLVED /\ verdict'[k] = verdict[k]
NeverLateAnswerDropped == [][~LateAnswerDropped]_vars

=============================================================================
