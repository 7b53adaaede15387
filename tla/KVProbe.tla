------------------------------ MODULE KVProbe ------------------------------
(***************************************************************************)
(* The asynchronous batched existence-lookup manager of kvprobe: the whole *)
(* manager, not one probe.                                                 *)
(*                                                                         *)
(* The scheduler owns the probe table (phase, generation, waiters, verdict *)
(* per key), the reverse index (request -> keys), this step's batch and    *)
(* the generation counter; its actions are Lookup, Flush, Drain, Cleanup,  *)
(* MarkMiss and Shutdown (LookupCore's methods in statemachine/core.py).   *)
(* The worker owns the groups it took; its actions are TakeBatch,          *)
(* CompleteGroup, FailGroup and TimeOut.  The two meet only in the         *)
(* submission queue (subq, batches of groups) and the result queue (resq,  *)
(* group outcomes).                                                        *)
(*                                                                         *)
(* Phase and action names are those of kvprobe.spec.lifecycle (Event      *)
(* values); the lifecycle table there is NOT restated here: the actions   *)
(* below say what the manager does, and tests/tla compares the phase      *)
(* transitions TLC explores with that table.                               *)
(*                                                                         *)
(* Mutant is a string naming one of the defects of DESIGN.md section 3,    *)
(* or "none" for the correct manager.                                      *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    Keys,     \* block keys
    Reqs,     \* request ids
    MaxGen,   \* generations 1..MaxGen may be created (bounds new probes)
    Mutant    \* "none" or a mutant name of DESIGN.md section 3

Mutants == {"none", "flush-submits-cleaned", "cleanup-drops-in-flight",
            "stale-result-applied", "double-result", "worker-error-drops-batch",
            "orphan-never-reclaimed", "mark-miss-in-flight-unguarded"}

ASSUME Mutant \in Mutants
ASSUME MaxGen \in Nat

Gens == 1..MaxGen
NoGen == 0

\* Phases (kvprobe.spec.lifecycle.phase_name); ABSENT means "no state".
ABSENT == "ABSENT"
PENDING == "PENDING"
IN_FLIGHT == "IN_FLIGHT"
RESOLVED == "RESOLVED"
Phases == {ABSENT, PENDING, IN_FLIGHT, RESOLVED}

\* Verdicts: none until resolved; hit = stored, miss = not stored.
Verdicts == {"none", "hit", "miss"}

\* A group: one request's share of a flush.  Generations are unique, so a
\* group is identified by its value (the code's group id adds nothing).
Probe == Keys \X Gens
Group == [req : Reqs, probes : SUBSET Probe]
\* What the worker publishes for a group: kind ok (a verdict per probe),
\* fail or timeout (the scheduler applies MISS to each key); late marks the
\* real answer of a call already reported as timed out.
OutcomeKinds == {"ok", "fail", "timeout"}

VARIABLES
    phase,     \* [Keys -> Phases]
    gen,       \* [Keys -> Gens \cup {NoGen}]: the state's generation
    waiters,   \* [Keys -> SUBSET Reqs]: requests waiting on the state
    verdict,   \* [Keys -> Verdicts]
    requests,  \* [Reqs -> SUBSET Keys]: the reverse index
    batch,     \* this step's batch: set of <<key, gen, req that asked>>
    nextGen,   \* the generation the next new state gets
    subq,      \* submission queue: Seq of batches (sets of groups)
    taken,     \* groups the worker took and has not finished
    timedOut,  \* groups of taken reported as TIMEOUT, whose late answer may follow
    resq,      \* result queue: Seq of outcomes
    down,      \* Shutdown happened
    \* History variables (never read by an action's guard):
    forced,    \* [Keys -> BOOLEAN]: MarkMiss hit this state
    applied,   \* [Keys -> Seq(Gens)]: generations of the results applied to this state
    sent,      \* [Gens -> Nat]: times each generation was submitted
    sentDead,  \* generations submitted although their state was not PENDING
    moot       \* generations whose in-flight probe a MarkMiss made moot

sched == <<phase, gen, waiters, verdict, requests, batch, nextGen>>
queues == <<subq, taken, timedOut, resq>>
history == <<forced, applied, sent, sentDead, moot>>
vars == <<sched, queues, down, history>>

-----------------------------------------------------------------------------
(* Helpers *)

Range(f) == {f[x] : x \in DOMAIN f}

Outcome(G, kind, ans, late) == [grp |-> G, kind |-> kind, ans |-> ans, late |-> late]
AllMiss(G) == [p \in G.probes |-> "miss"]

\* Groups submitted whose first outcome has not been applied yet.
OpenGroups ==
    UNION Range(subq)
    \cup (taken \ timedOut)
    \cup {o.grp : o \in {o2 \in Range(resq) : ~o2.late}}

OpenGens(k) == {p[2] : p \in {q \in UNION {G.probes : G \in OpenGroups} : q[1] = k}}

Live(k) == phase[k] # ABSENT

Reclaimed(k) ==  \* the assignments that delete key k's state
    [phase |-> ABSENT, gen |-> NoGen, waiters |-> {}, verdict |-> "none"]

-----------------------------------------------------------------------------
(* Initial state *)

Init ==
    /\ phase = [k \in Keys |-> ABSENT]
    /\ gen = [k \in Keys |-> NoGen]
    /\ waiters = [k \in Keys |-> {}]
    /\ verdict = [k \in Keys |-> "none"]
    /\ requests = [r \in Reqs |-> {}]
    /\ batch = {}
    /\ nextGen = 1
    /\ subq = <<>>
    /\ taken = {}
    /\ timedOut = {}
    /\ resq = <<>>
    /\ down = FALSE
    /\ forced = [k \in Keys |-> FALSE]
    /\ applied = [k \in Keys |-> <<>>]
    /\ sent = [g \in Gens |-> 0]
    /\ sentDead = {}
    /\ moot = {}

-----------------------------------------------------------------------------
(* Scheduler actions *)

\* Request r asks for key k (a request already waiting on k changes nothing:
\* the model leaves that repeated call out).  A new state gets the next
\* generation and joins this step's batch.
Lookup(k, r) ==
    /\ ~down
    /\ r \notin waiters[k]
    /\ \/ /\ phase[k] = ABSENT
          /\ nextGen \in Gens
          /\ phase' = [phase EXCEPT ![k] = PENDING]
          /\ gen' = [gen EXCEPT ![k] = nextGen]
          /\ waiters' = [waiters EXCEPT ![k] = {r}]
          /\ batch' = batch \cup {<<k, nextGen, r>>}
          /\ nextGen' = nextGen + 1
       \/ /\ phase[k] # ABSENT
          /\ waiters' = [waiters EXCEPT ![k] = @ \cup {r}]
          /\ UNCHANGED <<phase, gen, batch, nextGen>>
    /\ requests' = [requests EXCEPT ![r] = @ \cup {k}]
    /\ UNCHANGED <<verdict, queues, down, forced, applied, sent, sentDead, moot>>

\* End of step: submit this step's batch entries whose state is still the
\* PENDING state of the entry's generation, one group per request.  A key is
\* grouped under the request that asked for it if that one still waits,
\* else under any request that waits (the code picks the least id).
FlushSubmits(e) ==
    LET k == e[1] IN phase[k] = PENDING /\ gen[k] = e[2]

Flush ==
    /\ ~down
    /\ batch # {}
    /\ LET entries == IF Mutant = "flush-submits-cleaned"
                      THEN batch  \* also entries reclaimed or replaced since
                      ELSE {e \in batch : FlushSubmits(e)}
           moved == {e[1] : e \in {x \in entries : FlushSubmits(x)}}
       IN \E owner \in [entries -> Reqs] :
            /\ \A e \in entries :
                 IF e[3] \in waiters[e[1]] \/ ~FlushSubmits(e)
                 THEN owner[e] = e[3]
                 ELSE owner[e] \in waiters[e[1]]
            /\ LET groups == {[req |-> r,
                               probes |-> {<<e[1], e[2]>> : e \in {x \in entries : owner[x] = r}}]
                              : r \in Range(owner)}
               IN subq' = IF groups = {} THEN subq ELSE Append(subq, groups)
            /\ phase' = [k \in Keys |-> IF k \in moved THEN IN_FLIGHT ELSE phase[k]]
            /\ sent' = [g \in Gens |-> IF \E e \in entries : e[2] = g THEN sent[g] + 1 ELSE sent[g]]
            /\ sentDead' = sentDead \cup {e[2] : e \in {x \in entries : ~FlushSubmits(x)}}
    /\ batch' = {}
    /\ UNCHANGED <<gen, waiters, verdict, requests, nextGen, taken, timedOut, resq, down,
                   forced, applied, moot>>

\* Apply the oldest published outcome.  A probe's result applies only to
\* the IN_FLIGHT state of its own generation: with requests waiting it
\* becomes RESOLVED with the verdict (a failure or timeout gives MISS); with
\* none it is reclaimed (an orphan).  Anything else is dropped: a state of
\* another generation, a reclaimed state, an already RESOLVED state (a late
\* answer after a timeout, or a result racing a MarkMiss).
Drain ==
    /\ ~down
    /\ resq # <<>>
    /\ LET o == Head(resq)
           ProbesOf(k) == {p \in o.grp.probes : p[1] = k}
           \* the probe of o that concerns k's current state, if any
           Match(k) ==
               /\ Live(k)
               /\ IF Mutant = "stale-result-applied"
                  THEN ProbesOf(k) # {}        \* generations not compared
                  ELSE <<k, gen[k]>> \in o.grp.probes
           P(k) == IF Mutant = "stale-result-applied"
                   THEN CHOOSE p \in ProbesOf(k) : TRUE
                   ELSE <<k, gen[k]>>
           Applies(k) ==  \* the result sets the verdict
               /\ Match(k)
               /\ \/ phase[k] = IN_FLIGHT /\ waiters[k] # {}
                  \/ phase[k] = IN_FLIGHT /\ Mutant = "orphan-never-reclaimed"
                  \/ phase[k] = RESOLVED /\ Mutant = "double-result"
           Orphan(k) ==   \* the result reclaims a state nobody waits on
               /\ Match(k)
               /\ phase[k] = IN_FLIGHT /\ waiters[k] = {}
               /\ Mutant # "orphan-never-reclaimed"
       IN /\ phase' = [k \in Keys |-> IF Orphan(k) THEN ABSENT
                                      ELSE IF Applies(k) THEN RESOLVED ELSE phase[k]]
          /\ gen' = [k \in Keys |-> IF Orphan(k) THEN NoGen ELSE gen[k]]
          /\ verdict' = [k \in Keys |-> IF Applies(k) THEN o.ans[P(k)] ELSE verdict[k]]
          /\ forced' = [k \in Keys |-> IF Orphan(k) THEN FALSE ELSE forced[k]]
          /\ applied' = [k \in Keys |-> IF Orphan(k) THEN <<>>
                                        ELSE IF Applies(k) THEN Append(applied[k], P(k)[2])
                                        ELSE applied[k]]
    /\ resq' = Tail(resq)
    /\ UNCHANGED <<waiters, requests, batch, nextGen, subq, taken, timedOut, down,
                   sent, sentDead, moot>>

\* Request r finished: it stops waiting on every key.  A PENDING or RESOLVED
\* state nobody waits on any more is reclaimed; an IN_FLIGHT one is kept so
\* that a new request can join the probe.
Cleanup(r) ==
    /\ ~down
    /\ requests[r] # {}
    /\ LET ks == requests[r]
           Left(k) == waiters[k] \ {r}
           Gone(k) ==
               /\ k \in ks
               /\ Left(k) = {}
               /\ \/ phase[k] \in {PENDING, RESOLVED}
                  \/ phase[k] = IN_FLIGHT /\ Mutant = "cleanup-drops-in-flight"
       IN /\ phase' = [k \in Keys |-> IF Gone(k) THEN ABSENT ELSE phase[k]]
          /\ gen' = [k \in Keys |-> IF Gone(k) THEN NoGen ELSE gen[k]]
          /\ waiters' = [k \in Keys |-> IF k \in ks THEN Left(k) ELSE waiters[k]]
          /\ verdict' = [k \in Keys |-> IF Gone(k) THEN "none" ELSE verdict[k]]
          /\ forced' = [k \in Keys |-> IF Gone(k) THEN FALSE ELSE forced[k]]
          /\ applied' = [k \in Keys |-> IF Gone(k) THEN <<>> ELSE applied[k]]
    /\ requests' = [requests EXCEPT ![r] = {}]
    /\ UNCHANGED <<batch, nextGen, queues, down, sent, sentDead, moot>>

\* Loading the keys ks from the tier failed: force MISS.  A PENDING state is
\* never submitted; an IN_FLIGHT state's late result will be dropped, and if
\* nobody waits on it, it is reclaimed.  Keys without a state are ignored.
MarkMiss(ks) ==
    /\ ~down
    /\ ks # {}
    /\ \A k \in ks : Live(k)
    /\ LET Gone(k) == k \in ks /\ phase[k] = IN_FLIGHT /\ waiters[k] = {}
                      /\ Mutant # "mark-miss-in-flight-unguarded"
           Hit(k) == k \in ks /\ ~Gone(k)
           Unguarded(k) == Hit(k) /\ phase[k] = IN_FLIGHT /\ Mutant = "mark-miss-in-flight-unguarded"
       IN /\ phase' = [k \in Keys |-> IF Gone(k) THEN ABSENT
                                      ELSE IF Hit(k) /\ ~Unguarded(k) THEN RESOLVED
                                      ELSE phase[k]]
          /\ gen' = [k \in Keys |-> IF Gone(k) THEN NoGen ELSE gen[k]]
          /\ waiters' = [k \in Keys |-> IF Gone(k) THEN {} ELSE waiters[k]]
          /\ verdict' = [k \in Keys |-> IF Gone(k) THEN "none" ELSE IF Hit(k) THEN "miss" ELSE verdict[k]]
          /\ forced' = [k \in Keys |-> IF Gone(k) THEN FALSE ELSE IF Hit(k) THEN TRUE ELSE forced[k]]
          /\ applied' = [k \in Keys |-> IF Gone(k) THEN <<>> ELSE applied[k]]
          /\ moot' = moot \cup {gen[k] : k \in {x \in ks : phase[x] = IN_FLIGHT /\ ~Unguarded(x)}}
    /\ UNCHANGED <<requests, batch, nextGen, queues, down, sent, sentDead>>

\* Stop the worker and reclaim everything.  Nothing happens afterwards, so
\* every variable (history included: the invariants were checked on every
\* state before) returns to its initial value and all behaviours end in the
\* same state.
Shutdown ==
    /\ ~down
    /\ down' = TRUE
    /\ phase' = [k \in Keys |-> ABSENT]
    /\ gen' = [k \in Keys |-> NoGen]
    /\ waiters' = [k \in Keys |-> {}]
    /\ verdict' = [k \in Keys |-> "none"]
    /\ requests' = [r \in Reqs |-> {}]
    /\ batch' = {}
    /\ nextGen' = 1
    /\ subq' = <<>>
    /\ taken' = {}
    /\ timedOut' = {}
    /\ resq' = <<>>
    /\ forced' = [k \in Keys |-> FALSE]
    /\ applied' = [k \in Keys |-> <<>>]
    /\ sent' = [g \in Gens |-> 0]
    /\ sentDead' = {}
    /\ moot' = {}

-----------------------------------------------------------------------------
(* Worker actions: they touch only the queues and the worker's own groups. *)

TakeBatch ==
    /\ ~down
    /\ subq # <<>>
    /\ taken' = taken \cup Head(subq)
    /\ subq' = Tail(subq)
    /\ UNCHANGED <<sched, timedOut, resq, down, forced, applied, sent, sentDead, moot>>

\* Publish the backend's answer for G: one verdict per probe.  After a
\* TimeOut this is the late answer.
Answers(G) == [G.probes -> {"hit", "miss"}]

CompleteGroupOf(G, ans) ==
    /\ ~down
    /\ G \in taken
    /\ resq' = Append(resq, Outcome(G, "ok", ans, G \in timedOut))
    /\ taken' = taken \ {G}
    /\ timedOut' = timedOut \ {G}
    /\ UNCHANGED <<sched, subq, down, forced, applied, sent, sentDead, moot>>

\* The backend call failed (raised, short or long result, bad verdict).
FailGroupOf(G) ==
    /\ ~down
    /\ G \in taken
    /\ IF Mutant = "worker-error-drops-batch"
       THEN UNCHANGED resq          \* nothing published: the probes stay IN_FLIGHT
       ELSE resq' = Append(resq, Outcome(G, "fail", AllMiss(G), G \in timedOut))
    /\ taken' = taken \ {G}
    /\ timedOut' = timedOut \ {G}
    /\ UNCHANGED <<sched, subq, down, forced, applied, sent, sentDead, moot>>

\* The call overstayed the timeout: publish TIMEOUT now; the group stays
\* with the worker, which may publish its late answer later (or never).
TimeOutOf(G) ==
    /\ ~down
    /\ G \in taken \ timedOut
    /\ resq' = Append(resq, Outcome(G, "timeout", AllMiss(G), FALSE))
    /\ timedOut' = timedOut \cup {G}
    /\ UNCHANGED <<sched, subq, taken, down, forced, applied, sent, sentDead, moot>>

\* The worker's first answer for a group it holds (late answers excluded:
\* a stuck call may never return, and nothing waits for it).
WorkerAnswers ==
    \E G \in taken \ timedOut :
        \/ \E ans \in Answers(G) : CompleteGroupOf(G, ans)
        \/ FailGroupOf(G)
        \/ TimeOutOf(G)

-----------------------------------------------------------------------------
(* The specification *)

\* After Shutdown the system stops; this stutter is the only intended end,
\* so that TLC's deadlock check (on) reports any other state without a
\* successor.
Terminated == down /\ UNCHANGED vars

SchedulerNext ==
    \/ \E k \in Keys, r \in Reqs : Lookup(k, r)
    \/ Flush
    \/ Drain
    \/ \E r \in Reqs : Cleanup(r)
    \/ \E k \in Keys : MarkMiss({k})
    \/ Shutdown

\* One operator per action, so that TLC names each step by its action.
CompleteGroup == \E G \in taken : \E ans \in Answers(G) : CompleteGroupOf(G, ans)
FailGroup == \E G \in taken : FailGroupOf(G)
TimeOut == \E G \in taken : TimeOutOf(G)

WorkerNext == TakeBatch \/ CompleteGroup \/ FailGroup \/ TimeOut

Next == SchedulerNext \/ WorkerNext \/ Terminated

\* Weak fairness: the worker takes batches and answers the groups it holds;
\* the scheduler drains published results and flushes at the end of every
\* step.  Lookup, Cleanup, MarkMiss and Shutdown are up to the engine.
Fairness ==
    /\ WF_vars(TakeBatch)
    /\ WF_vars(WorkerAnswers)
    /\ WF_vars(Drain)
    /\ WF_vars(Flush)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Invariants (docs/properties.md) *)

TypeOK ==
    /\ phase \in [Keys -> Phases]
    /\ gen \in [Keys -> Gens \cup {NoGen}]
    /\ waiters \in [Keys -> SUBSET Reqs]
    /\ verdict \in [Keys -> Verdicts]
    /\ requests \in [Reqs -> SUBSET Keys]
    /\ batch \subseteq Keys \X Gens \X Reqs
    /\ nextGen \in 1..(MaxGen + 1)
    /\ \A i \in DOMAIN subq : subq[i] \subseteq Group
    /\ taken \subseteq Group
    /\ timedOut \subseteq taken
    /\ \A i \in DOMAIN resq :
          /\ resq[i].grp \in Group
          /\ resq[i].kind \in OutcomeKinds
          /\ resq[i].ans \in [resq[i].grp.probes -> {"hit", "miss"}]
          /\ resq[i].late \in BOOLEAN
    /\ down \in BOOLEAN
    /\ forced \in [Keys -> BOOLEAN]
    /\ \A k \in Keys : \A i \in DOMAIN applied[k] : applied[k][i] \in Gens
    /\ sent \in [Gens -> Nat]
    /\ sentDead \subseteq Gens
    /\ moot \subseteq Gens
    /\ \A k \in Keys : (phase[k] = ABSENT) <=> (gen[k] = NoGen)

\* A generation is submitted at most once, and only while its state is
\* PENDING at flush; at most one result per generation is applied.
EnqueueOnce ==
    /\ \A g \in Gens : sent[g] <= 1
    /\ sentDead = {}
    /\ \A k \in Keys : Len(applied[k]) <= 1

\* For each key, at most one submitted-and-unanswered generation whose state
\* has not reached RESOLVED; a probe made moot by a MarkMiss does not count.
NoDuplicateProbe ==
    \A k \in Keys :
        Cardinality({g \in OpenGens(k) :
                        /\ g \notin moot
                        /\ ~(gen[k] = g /\ phase[k] = RESOLVED)}) <= 1

\* A result is never applied to a state of another generation.
StaleGenerationDropped ==
    \A k \in Keys : \A i \in DOMAIN applied[k] : applied[k][i] = gen[k]

VerdictIffResolved ==
    \A k \in Keys : (verdict[k] # "none") <=> (phase[k] = RESOLVED)

\* After MarkMiss(k) the verdict stays MISS until the state is reclaimed.
ForcedMissSticks ==
    \A k \in Keys : forced[k] => verdict[k] = "miss"

ReverseIndexConsistent ==
    \A r \in Reqs, k \in Keys :
        (k \in requests[r]) <=> (phase[k] # ABSENT /\ r \in waiters[k])

\* Safety part of "nothing leaks": no PENDING or RESOLVED state without
\* waiters; a PENDING state is in this step's batch; an IN_FLIGHT state has
\* an open group of its generation (so a result will come).
NothingLeaks ==
    \A k \in Keys :
        /\ phase[k] \in {PENDING, RESOLVED} => waiters[k] # {}
        /\ phase[k] = PENDING => \E r \in Reqs : <<k, gen[k], r>> \in batch
        /\ phase[k] = IN_FLIGHT => gen[k] \in OpenGens(k)

AfterShutdownEmpty ==
    down => \A k \in Keys : phase[k] = ABSENT

-----------------------------------------------------------------------------
(* Liveness *)

NoWaiters == \A r \in Reqs : requests[r] = {}
TableEmpty == \A k \in Keys : phase[k] = ABSENT

\* Every PENDING or IN_FLIGHT probe is eventually RESOLVED or reclaimed
\* (a key's generation changes only through ABSENT, so this covers "or
\* replaced by a newer probe"); if from some point on no request waits any
\* more, the table ends up empty.
EventuallyReclaimed ==
    /\ \A k \in Keys :
          (phase[k] \in {PENDING, IN_FLIGHT}) ~> (phase[k] \in {RESOLVED, ABSENT})
    /\ (<>[]NoWaiters) => <>[]TableEmpty

=============================================================================
