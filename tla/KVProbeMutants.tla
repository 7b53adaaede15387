--------------------------- MODULE KVProbeMutants ---------------------------
(***************************************************************************)
(* Defective variants of parts of KVProbe's actions: the mutants the       *)
(* checks must catch (docs/properties.md says what each one changes and    *)
(* which property catches it).  Nothing here is used unless a config       *)
(* replaces a part of KVProbe with one of these operators through TLC's    *)
(* operator override, e.g.                                                 *)
(*                                                                         *)
(*     CONSTANTS                                                           *)
(*         CleanupReclaims <- ReclaimsInFlight                             *)
(*                                                                         *)
(* and checks this module (it extends MC, so every config's operators are  *)
(* here).  The overrides of each mutant are listed once, in                *)
(* src/kvprobe/tlc_mutants.py; `kvprobe check --mutant NAME` appends them to   *)
(* the config.  An override replaces the operator everywhere, so no        *)
(* operator below calls the one it replaces (that would recurse).          *)
(*                                                                         *)
(* Only helpers of an action are replaced, never an action of Next:        *)
(* TLC names a step by the action operator, and a replaced action would    *)
(* be named after its replacement.                                         *)
(***************************************************************************)
EXTENDS MC

-----------------------------------------------------------------------------
(* Lookup *)

\* lookup-skips-drain: Lookup (and Flush) no longer wait for the published
\* outcomes to be applied.
NeverWaitsForDrain == TRUE

\* lookup-after-shutdown: Lookup is not refused after Shutdown.
LookupReadyAfterShutdown == Drained

\* lookup-rejoins-batch: a request joining a PENDING probe adds a second
\* entry to this step's batch.
LookupJoinRejoinsBatch(k, r) ==
    /\ phase[k] # ABSENT
    /\ waiters' = [waiters EXCEPT ![k] = @ \cup {r}]
    /\ out' = [key |-> k, req |-> r, ans |-> verdict[k]]
    /\ batch' = IF phase[k] = PENDING THEN batch \cup {<<k, gen[k], r>>} ELSE batch
    /\ UNCHANGED <<phase, gen, nextGen>>

-----------------------------------------------------------------------------
(* Flush *)

\* flush-submits-cleaned: every entry of the step's batch goes out, also
\* entries whose state was reclaimed (or replaced) since the lookup.
WholeBatch == batch

\* flush-ignores-gen: an entry goes out if its key is PENDING, whatever
\* the entry's generation.
SubmitsAnyGeneration(e) == phase[e[1]] = PENDING

\* flush-submits-forced: an entry of the state's generation goes out
\* whatever its phase (a probe forced to MISS too).
SubmitsAnyPhase(e) == gen[e[1]] = e[2]

\* flush-while-dead: Flush submits to a dead worker instead of reviving it.
SubmitsToDeadWorker == TRUE

-----------------------------------------------------------------------------
(* Drain *)

\* death-forgets-open: the death marker concerns no probe (the open groups
\* are forgotten instead of failed).
ProbesForgettingOpen(o) == IF o.kind = "died" THEN {} ELSE o.grp.probes

\* stale-result-applied: an outcome applies to a key's state whatever
\* generation its probe of that key has ...
MatchesAnyGeneration(o, k) == Live(k) /\ ProbesOf(o, k) # {}

\* ... and the state gets the answer of any of its probes of that key.
AnyProbeOfKey(o, k) == CHOOSE p \in ProbesOf(o, k) : TRUE

\* fail-resolves-hit: a failed, timed-out or saturated group's keys are HIT.
AnswerFailedAsHit(o, k) ==
    CASE o.kind = "ok" -> o.ans[OutcomeProbe(o, k)]
      [] o.kind = "died" -> "miss"
      [] OTHER -> "hit"

\* verdict-from-other-key: every key gets the answer of one (any) probe of
\* the group.
AnswerOfAnyKey(o, k) == IF o.kind = "ok" THEN o.ans[CHOOSE p \in OutcomeProbes(o) : TRUE] ELSE "miss"

\* double-result: an outcome also resolves a RESOLVED state of its
\* generation again (e.g. the late answer after a timeout).
ResolvesAgain(o, k) ==
    /\ OutcomeMatches(o, k)
    /\ \/ phase[k] = IN_FLIGHT /\ waiters[k] # {}
       \/ phase[k] = RESOLVED

\* orphan-never-reclaimed: an outcome resolves an IN_FLIGHT state nobody
\* waits on ...
ResolvesOrphans(o, k) == OutcomeMatches(o, k) /\ phase[k] = IN_FLIGHT

\* ... instead of reclaiming it.
ReclaimsNothing(o, k) == FALSE

\* stale-reclaims-newer: an outcome reclaims an IN_FLIGHT state nobody
\* waits on whatever generation its probe of that key has.
ReclaimsAnyGeneration(o, k) ==
    Live(k) /\ ProbesOf(o, k) # {} /\ phase[k] = IN_FLIGHT /\ waiters[k] = {}

-----------------------------------------------------------------------------
(* Cleanup and MarkMiss *)

\* cleanup-drops-in-flight: Cleanup of the last waiter reclaims an
\* IN_FLIGHT state too; the next request probes the key again.
ReclaimsInFlight == {PENDING, IN_FLIGHT, RESOLVED}

\* cleanup-keeps-reverse-index: the finished request's keys stay in the
\* reverse index.
KeepsReverseIndex(r) == requests

\* mark-miss-in-flight-unguarded: MarkMiss sets the verdict MISS but leaves
\* an IN_FLIGHT state IN_FLIGHT, so its late result overrides the miss.
LeavesInFlight(k) == IF phase[k] = IN_FLIGHT THEN IN_FLIGHT ELSE RESOLVED

-----------------------------------------------------------------------------
(* Worker *)

\* The worker drops a group it holds: nothing is published, so the group's
\* probes stay IN_FLIGHT.
PublishesNothing(G) ==
    /\ UNCHANGED chainHistory
    /\ UNCHANGED store
    /\ UNCHANGED memory
    /\ wstate # DEAD
    /\ G \in taken
    /\ taken' = taken \ {G}
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
                   wstate, subq, stuck, resq, history>>

\* worker-error-drops-batch: a failed backend call publishes nothing
\* (FailGroupOf <- PublishesNothing).

\* saturate-publishes-nothing: Saturate takes the group but publishes nothing.
SaturatesSilently(G) ==
    /\ MaxStuck > 0
    /\ Cardinality(stuck) >= MaxStuck
    /\ PublishesNothing(G)

-----------------------------------------------------------------------------
(* Outputs and verdicts pinned to what happened elsewhere (issues 26, 29, *)
(* 25): each variant below passed every config before its clause existed. *)

\* lookup-answers-pending-miss: a lookup joining a PENDING probe answers
\* MISS instead of "ask again".
PendingAnswersMiss(k) == IF phase[k] = PENDING THEN "miss" ELSE verdict[k]

\* saturate-answers-stored: a saturated group (no call made) is published as
\* an ordinary answered call, every key stored.
SaturatesAsStored(G) ==
    /\ MaxStuck > 0
    /\ Cardinality(stuck) >= MaxStuck
    /\ Publish(G, "ok", [p \in G.probes |-> "hit"])
    /\ taken' = taken \ {G}
    /\ UNCHANGED <<stuck, backendHit>>
    /\ UNCHANGED memory

\* stale-answer-applied: an outcome applies to a key's state whatever the
\* generation (MatchesAnyGeneration), with the answer of the outcome's own
\* probe of that key.
AnswerOfItsProbe(o, k) == IF o.kind = "ok" THEN o.ans[CHOOSE p \in ProbesOf(o, k) : TRUE] ELSE "miss"

\* mark-miss-skips-unresolved (on default.cfg): the native manager's
\* MarkMiss leaves a PENDING or IN_FLIGHT key alone, as vLLM 0.33's does.
ForcesResolvedOnly(k) == phase[k] = RESOLVED

\* mark-miss-forces-unresolved (on vllm.cfg): the drop-in's MarkMiss forces
\* a PENDING or IN_FLIGHT key too, as the native manager does.
ForcesEveryLiveKey(k) == TRUE

\* worker-holds-until-idle (issue 29; reach.cfg): a group's answer is
\* published only once no other group is running, as a dispatcher that
\* holds the calls that returned until the rest finished.  In the model a
\* held answer is an answer step taken later, so no safety property sees
\* it; the witness NeverAppliedBesideRunning of reach.cfg disappears.
PublishesWhenIdle(G, ans) ==
    /\ taken = {G}
    /\ CallReturned(G, ans)
    /\ backendMiss' = IF CacheOn THEN backendMiss \cup {p \in G.probes : ans[p] = "miss"} ELSE backendMiss
    /\ UNCHANGED <<mem, memGen, recalled, forgot>>
    /\ Publish(G, "ok", ans)
    /\ taken' = {}
    /\ UNCHANGED stuck

-----------------------------------------------------------------------------
(* The chain walk (tla/chain.cfg) *)

\* window-skips-ahead: a walk probes the next window once the keys before
\* the window it is in answered stored, not waiting for that window.
WindowOpenEarly(i) ==
    IF WindowStart(i) = 1 THEN TRUE
    ELSE \A j \in 1..(WindowStart(WindowStart(i) - 1) - 1) : verdict[Chain[j]] = "hit"

\* probe-after-miss: a walk finishes the window it is in after meeting a
\* key known NOT stored.
NoMissBeforeWindow(i) == \A j \in 1..(WindowStart(i) - 1) : verdict[Chain[j]] # "miss"

\* window-presumed-stored: a walk reports the keys of a window not answered
\* yet as stored.
FindsUnansweredStored(k) == verdict'[k] \in {"hit", "none"}

\* walk-skips-a-key: a walk looks up the key at position i once its request
\* waits on every key before i - 1: it skips a key whose answer another
\* request made known, and counts it among its leading hits.
ReachedButLast(r, i) == \A j \in 1..(i - 2) : r \in waiters[Chain[j]]

-----------------------------------------------------------------------------
(* The inferred walk (tla/chain-inferred.cfg) *)

\* search-infers-unverified: the search answers once a single position
\* separates what it knows stored from what it knows NOT stored, counting
\* that position stored unprobed (SearchDecided <- DecidedOneShort).
DecidedOneShort(r) == SearchHi(r) <= SearchLo(r) + 2

\* search-skips-exact-rewalk: a refuted key does not stop the search: a
\* chain whose inferred key failed to load is inferred again
\* (ChainTrusted <- TrustsRefuted).
TrustsRefuted == TRUE

\* search-ignores-earlier-miss: the search's first known miss is looked for
\* only after the last position it knows stored, so a key it knows NOT
\* stored before a later known hit is counted stored (SearchHi <- MissAfterLastHit).
MissAfterLastHit(r) ==
    CHOOSE h \in 1..(Len(Chain) + 1) :
        /\ h = Len(Chain) + 1 \/ (KnownMiss(r, h) /\ \A l \in (h + 1)..Len(Chain) : ~KnownHit(r, l))
        /\ \A j \in 1..(h - 1) : ~KnownMiss(r, j) \/ \E l \in (j + 1)..Len(Chain) : KnownHit(r, l)

\* cleanup-drops-refuted: a request's Cleanup takes its keys off the refuted
\* set, so the next walk infers across the hole a failed load proved
\* (CleanupStore <- DropsRefuted).
DropsRefuted(r) ==
    /\ refuted' = refuted \ requests[r]
    /\ UNCHANGED <<stored, prefixAtHit, failedLoads>>

-----------------------------------------------------------------------------
(* Positioned lookups (tla/positions.cfg) *)

\* position-probes-past-miss: the positioned rule does not look for a key
\* known NOT stored before the key, so it probes past its request's known
\* miss (PosMissBefore <- MissNeverSeen).
MissNeverSeen(r, i) == FALSE

\* position-window-never-opens: every key past the first window is
\* deferred, whatever the keys before it resolved to, so a deferred key is
\* never probed (PosPastWindow <- WindowNeverOpens).
WindowNeverOpens(r, i) == i > FirstWindow

-----------------------------------------------------------------------------
(* The verdict cache (tla/cache.cfg) *)

\* cache-keeps-marked-miss: MarkMiss does not make the cache forget, so a
\* remembered "stored" whose load failed is served again.
ForgetsNothing(ks, k) == FALSE

\* cache-remembers-failure: the cache remembers whatever Drain applies: the
\* MISS of a failure, timeout, saturation or dead worker too.
RemembersAnyOutcome(o) == TRUE

\* cache-forgets-live-only: MarkMiss forgets only the keys that have a state,
\* so the remembered "stored" of a key no request holds, whose load failed,
\* is served to the next request.
ForgetsLiveOnly(ks, k) == k \in MarkMissPasses(ks) /\ Live(k)

\* cache-keeps-moot-answer: Drain remembers the backend's answer of every
\* probe of the outcome, also one whose state a MarkMiss forced or reclaimed
\* while it was in flight (its generation is moot) (CachedProbes <- CachesEveryAnswer).
CachesEveryAnswer(o) == IF CacheOn /\ Remembers(o) THEN OutcomeProbes(o) ELSE {}

=============================================================================
