------------------------------ MODULE KVProbe ------------------------------
(***************************************************************************)
(* The asynchronous batched existence-lookup manager of kvprobe: the whole *)
(* manager, not one probe.                                                 *)
(*                                                                         *)
(* Two processes meet only in two queues.                                  *)
(*                                                                         *)
(* The scheduler owns the probe table (phase, generation, waiters, verdict *)
(* per key), the reverse index (request -> keys), this step's batch, the   *)
(* generation counter and the groups it submitted and has not seen         *)
(* answered (open); its actions are Lookup, Flush, Drain, Revive, Cleanup, *)
(* MarkMiss and Shutdown (LookupCore's methods, statemachine/core.py and   *)
(* the layers under it, handoff.py and probe_table.py, and the manager's   *)
(* revive).  Lookup and Flush drain first: they are enabled                *)
(* only once every published outcome has been applied.                     *)
(*                                                                         *)
(* The worker (docs/worker.md) is up, dead or stopped.  Its actions are    *)
(* TakeBatch, CompleteGroup, FailGroup, TimeOut, Saturate, LateAnswer and  *)
(* Die.  It owns the groups it took (taken) and the calls that overstayed  *)
(* their timeout (stuck; while MaxStuck are, it saturates).  A stopped     *)
(* worker may still finish the calls it had started and publish them:     *)
(* nothing it publishes is applied any more.                               *)
(*                                                                         *)
(* Phase names are those of kvprobe.spec.lifecycle, action names those of  *)
(* kvprobe.spec.actions (tests/tla/test_actions.py checks that Next's      *)
(* actions are the ones declared there); the lifecycle table is NOT        *)
(* restated here: the actions below say what the manager does, and         *)
(* tests/tla compares the phase transitions TLC explores with that table.  *)
(*                                                                         *)
(* History variables are written by the actions from what happened (what   *)
(* was submitted in which phase, what the worker answered, which           *)
(* generation's outcome changed a state) and read only by the invariants.  *)
(*                                                                         *)
(* This module states the intended system only.  The defects the checks    *)
(* must catch (docs/properties.md) live in KVProbeMutants.tla: each one    *)
(* replaces a small named part of an action below (a guard, a set, one of  *)
(* Drain's Outcome operators) through TLC's operator override in the       *)
(* config; src/kvprobe/tlc_mutants.py says which part each one replaces.       *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    Keys,      \* block keys
    Reqs,      \* request ids
    MaxGen,    \* generations 1..MaxGen may be created (bounds new probes)
    MaxStuck,  \* the worker saturates while this many calls are stuck (0: no timeout)
    MaxDeaths  \* the worker dies at most this often (a bound of the model)

ASSUME MaxGen \in Nat /\ MaxStuck \in Nat /\ MaxDeaths \in Nat

\* The manager's mark_miss, a definition a config may override (vllm.cfg:
\* MarkMissFlavour = "vllm").  "native", kvprobe's own manager: every live
\* key given is forced to MISS.  "vllm", the vLLM drop-in (vLLM 0.33's
\* contract): only a RESOLVED key is forced; a PENDING or IN_FLIGHT probe
\* is left to its own result.
MarkMissFlavour == "native"
ASSUME MarkMissFlavour \in {"native", "vllm"}

\* The opt-in verdict cache (docs/cache.md), a definition a config may
\* override (cache.cfg: CacheOn = TRUE).  Off, the memory variables keep
\* their initial values, so a config without it explores the same states.
CacheOn == FALSE
ASSUME CacheOn \in BOOLEAN

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

\* Worker states (docs/worker.md).
UP == "up"
DEAD == "dead"
STOPPED == "stopped"

\* A group: one request's share of a flush.  Generations are unique, so a
\* group is identified by its value (the code's group id adds nothing).
Probe == Keys \X Gens
Group == [req : Reqs, probes : SUBSET Probe]
\* What the worker publishes: kind ok (a verdict per probe), fail, timeout or
\* saturated (the scheduler applies MISS to each key), or the death marker
\* (kind died, no group: the scheduler fails every open group).  late marks
\* the answer of a call already reported as timed out.
OutcomeKinds == {"ok", "fail", "timeout", "saturated", "died"}
NoGroup == [req |-> "none", probes |-> {}]
\* The output of the last step: the answer of a Lookup, NoOut after any other.
NoOut == [key |-> "none", req |-> "none", ans |-> "none"]

VARIABLES
    phase,     \* [Keys -> Phases]
    gen,       \* [Keys -> Gens \cup {NoGen}]: the state's generation
    waiters,   \* [Keys -> SUBSET Reqs]: requests waiting on the state
    verdict,   \* [Keys -> Verdicts]
    requests,  \* [Reqs -> SUBSET Keys]: the reverse index
    batch,     \* this step's batch: set of <<key, gen, req that asked>>
    nextGen,   \* the generation the next new state gets
    open,      \* groups submitted whose first outcome the scheduler has not applied
    down,      \* Shutdown happened
    out,       \* the answer of the Lookup that made this step, else NoOut
    wstate,    \* the worker: UP, DEAD or STOPPED
    subq,      \* submission queue: Seq of batches (sets of groups)
    taken,     \* groups the worker took and is calling the backend for
    stuck,     \* groups whose call overstayed its timeout (TIMEOUT published)
    resq,      \* result queue: Seq of outcomes
    \* History variables (written from what happened, read only by invariants):
    forced,    \* [Keys -> BOOLEAN]: MarkMiss hit this state
    told,      \* [Probe -> Verdicts]: the first outcome published for the probe
               \* (hit/miss; miss for fail, timeout, saturated, death)
    sent,      \* [Gens -> Nat]: submissions of each generation, counted at Flush
    sentIn,    \* [Gens -> Phases \cup {"never"}]: the probe's phase at its last submission
    applied,   \* [Gens -> Nat]: outcomes applied to (resolving or reclaiming) each generation
    stale,     \* an outcome of one generation changed a state of another one
    moot,      \* generations whose in-flight probe a MarkMiss made moot
    deaths,    \* times the worker died
    \* History of the backend itself, written only where a call returns with
    \* its answers (CompleteGroup), never where the worker publishes:
    backendHit \* SUBSET Probe: the probes a call answered "stored" for, in time

\* The chain walk's history (block "The chain walk" below): what walks did,
\* written by the Lookups of walks, read only by the chain's invariants.
VARIABLES
    chainPastMiss,  \* a walk looked a key up after a key of its chain was known NOT stored
    chainAhead,     \* a walk looked a key up while a key before that key's window was not known stored
    chainUntoldHit, \* a walk found a key stored that no backend call had answered stored
    chainSkipped,   \* a walk looked a key up before its request had looked up every earlier key
    asked,          \* [Reqs -> SUBSET Keys]: the chain's keys each request looked up since it
                    \* started (written by its Lookups, emptied when it finishes)
    \* Positioned lookups (block "Positioned lookups" below):
    posPastMiss,    \* a positioned lookup probed a key after a key its request knew NOT stored
    deferred        \* [Reqs -> SUBSET Keys]: keys whose last positioned lookup by the request
                    \* was deferred (emptied when it finishes)

chainFlags == <<chainPastMiss, chainAhead, chainUntoldHit, chainSkipped>>
positionsHistory == <<posPastMiss, deferred>>
chainHistory == <<chainFlags, asked, positionsHistory>>

\* The store and the inferred walk (block "The store and the inferred walk"
\* below).  Constant unless a config models the store or the inferred mode.
VARIABLES
    stored,             \* SUBSET Keys: the blocks the tier holds (StoreModelled; else {} throughout)
    prefixAtHit,        \* [Keys -> BOOLEAN]: the chain's keys before the key were all stored when a call last answered it stored
    refuted,            \* SUBSET Keys: keys MarkMiss was given in the inferred mode (failed loads)
    failedLoads         \* SUBSET Keys: history of refuted: every key whose load failed in the
                        \* inferred mode; it never shrinks (RefutedWalkedExactly reads it)

store == <<stored, prefixAtHit, refuted, failedLoads>>
\* The verdict cache (CacheOn; docs/cache.md): backend answers remembered
\* across requests.  Expiry and eviction are not counted: an entry may be
\* dropped at any Lookup of its key (a new probe is made instead), which
\* covers every TTL and bound.
VARIABLES
    mem,         \* [Keys -> Verdicts]: the remembered answer of each key ("none": nothing)
    memGen,      \* [Keys -> Gens \cup {NoGen}]: the generation whose answer it is
    \* History (read only by CacheProvenance):
    recalled,    \* [Probe -> Gens \cup {NoGen}]: a probe served from memory -> the generation recalled
    forgot,      \* SUBSET Probe: remembered answers a MarkMiss forgot
    backendMiss  \* SUBSET Probe: the probes a call answered "not stored" for, in time

memory == <<mem, memGen, recalled, forgot, backendMiss>>

sched == <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down, out>>
worker == <<wstate, subq, taken, stuck, resq>>
history == <<forced, told, sent, sentIn, applied, stale, moot, deaths, backendHit>>
vars == <<sched, worker, history, chainHistory, store, memory>>

-----------------------------------------------------------------------------
(* Helpers *)

Range(f) == {f[x] : x \in DOMAIN f}

Outcome(G, kind, ans, late) == [grp |-> G, kind |-> kind, ans |-> ans, late |-> late]
AllMiss(G) == [p \in G.probes |-> "miss"]
Marker == Outcome(NoGroup, "died", AllMiss(NoGroup), FALSE)

Live(k) == phase[k] # ABSENT

\* The history of a published first outcome: what it says for each probe.
Tell(G, ans) == [p \in Probe |-> IF p \in G.probes THEN ans[p] ELSE told[p]]

\* Groups whose outcome will reach the scheduler: queued to or held by a
\* live worker, or published and not yet drained; while a death marker is
\* published, every open group (the marker fails them).
Coming ==
    IF \E i \in DOMAIN resq : resq[i].kind = "died" THEN open
    ELSE {o.grp : o \in {x \in Range(resq) : ~x.late}}
         \cup (IF wstate = UP THEN UNION Range(subq) \cup taken ELSE {})

GensIn(S, k) == {p[2] : p \in {q \in UNION {G.probes : G \in S} : q[1] = k}}

-----------------------------------------------------------------------------
(* The chain walk (lookup_chain, statemachine/chain.py)                     *)
(*                                                                         *)
(* A walk of request r's chain is a sequence of Lookups, one per key, in   *)
(* chain order.  Every Lookup is made either on its own or by a walk; a    *)
(* walk may look up the key at position i only if it looked up every      *)
(* earlier key, none of them is known NOT stored (it stops at the first    *)
(* miss), and every key before i's window is known stored (a window is     *)
(* probed only once the keys before it all answered stored).  The windows *)
(* hold FirstWindow keys, then twice as many each (statemachine/windows.py).*)
(* Chain is empty here (no walk); the chain configs put one in its place.  *)

\* The chain every request walks (a sequence of distinct keys; none here).
Chain == <<>>

\* How many keys the first window holds (the others double).
FirstWindow == 1

\* Where the window holding position i starts: with a first window of F
\* keys, window e holds positions F * (2^e - 1) + 1 .. F * (2^(e+1) - 1).
\* This is the default growth 2 (chain_window_growth); the library's other
\* growths (window e holds ceil(F * g^e) keys) are covered by the reference
\* model (spec/model_chain.py) and its property tests, not here: the chain
\* configs hold 2 keys, whose windows (first window 1: {1}, {2}) are the
\* same for every growth, so no growth changes a behaviour of this model.
WindowStart(i) ==
    CHOOSE s \in {FirstWindow * (2^e - 1) + 1 : e \in 0..Len(Chain)} : s <= i /\ i < 2 * s - 1 + FirstWindow

\* The walk of r reached position i: r waits on every earlier key of the chain.
ChainReached(r, i) == \A j \in 1..(i - 1) : r \in waiters[Chain[j]]

\* The walk stops at the first key known NOT stored.
ChainNoMissBefore(i) == \A j \in 1..(i - 1) : verdict[Chain[j]] # "miss"

\* A window is probed only once every key before it is known stored.
ChainWindowOpen(i) == \A j \in 1..(WindowStart(i) - 1) : verdict[Chain[j]] = "hit"

\* What the walk reports for the key it looked up: stored iff its verdict
\* after the Lookup is a hit (a key served from memory is answered at once).
ChainFindsStored(k) == verdict'[k] = "hit"

\* The generation whose backend answer the state of k holds after this
\* Lookup: the one it was recalled from if it was served from memory.
SourceAfter(k) == IF recalled'[<<k, gen'[k]>>] # NoGen THEN recalled'[<<k, gen'[k]>>] ELSE gen'[k]

\* History: a backend call answered k stored for the generation its state
\* holds the answer of after this Lookup, and k was not forced.
AnsweredStored(k) == <<k, SourceAfter(k)>> \in backendHit /\ ~forced[k]

-----------------------------------------------------------------------------
(* The store and the inferred walk (chain_mode="inferred",                 *)
(* statemachine/inferred.py)                                               *)
(*                                                                         *)
(* The inferred walk assumes the store is prefix-closed: a block is stored *)
(* only if every block before it in the chain is, and eviction removes     *)
(* suffixes first.  It searches for the stored prefix's end: r's next      *)
(* Lookup is at position 1, 2, 4, 8, ... while no key of the chain is      *)
(* known NOT stored, then midway between the last position r knows stored  *)
(* (SearchLo) and the first it knows NOT stored (SearchHi); once they are  *)
(* adjacent the walk answers, counting the keys before the boundary stored *)
(* without a probe (Infers).  The search reads what r's own lookups told   *)
(* it (the code replays its own path: a subset of that knowledge).  A      *)
(* chain holding a refuted key (one MarkMiss was given in this mode: the   *)
(* engine's load of it failed) is walked exactly.  With StoreModelled the  *)
(* backend answers what the store holds, and the tier evicts (within       *)
(* TakeBatch) a suffix of the chain (PrefixClosed) or, with the assumption *)
(* broken, any one key; the store starts as any prefix, or any subset.     *)

\* The backend answers from the store (chain-inferred configs); else anything.
StoreModelled == FALSE

\* Eviction removes suffixes of the chain (the inferred walk's assumption).
PrefixClosed == TRUE

\* lookup_chain's mode: "exact" (every key up to the first miss) or "inferred".
ChainMode == "exact"
ASSUME ChainMode \in {"exact", "inferred"}

ChainKeys == {Chain[j] : j \in DOMAIN Chain}
ChainPrefix(n) == {Chain[j] : j \in 1..n}

\* The stores a run starts from: a prefix of the chain, or (assumption
\* broken) any set of its keys; nothing when the store is not modelled.
StoreStarts ==
    IF ~StoreModelled THEN {{}}
    ELSE IF PrefixClosed THEN {ChainPrefix(n) : n \in 0..Len(Chain)}
    ELSE SUBSET ChainKeys

StoreInit ==
    /\ stored \in StoreStarts
    /\ prefixAtHit = [k \in Keys |-> FALSE]
    /\ refuted = {}
    /\ failedLoads = {}

\* What r's own lookups of the chain told it.
KnownHit(r, i) == r \in waiters[Chain[i]] /\ verdict[Chain[i]] = "hit"
KnownMiss(r, i) == r \in waiters[Chain[i]] /\ verdict[Chain[i]] = "miss"

\* The first position r knows NOT stored (Len(Chain) + 1: none), and the
\* last position before it that r knows stored (0: none).
SearchHi(r) ==
    CHOOSE h \in 1..(Len(Chain) + 1) :
        /\ h = Len(Chain) + 1 \/ KnownMiss(r, h)
        /\ \A j \in 1..(h - 1) : ~KnownMiss(r, j)
SearchLo(r) ==
    CHOOSE l \in 0..(SearchHi(r) - 1) :
        /\ l = 0 \/ KnownHit(r, l)
        /\ \A j \in (l + 1)..(SearchHi(r) - 1) : ~KnownHit(r, j)

\* The position the search probes next: 1, 2, 4, 8, ... (the last at
\* most) until a miss is known, then the midpoint.
SearchNext(lo, hi) ==
    IF hi <= Len(Chain) THEN (lo + hi) \div 2
    ELSE IF lo = 0 THEN 1
    ELSE IF 2 * lo < Len(Chain) THEN 2 * lo ELSE Len(Chain)

\* The search of r has found its boundary: SearchLo stored, the next key not
\* (or the chain's end).
SearchDecided(r) == SearchHi(r) = SearchLo(r) + 1

\* No key of the chain was refuted: the walk may search.
ChainTrusted == refuted \cap ChainKeys = {}

Searching == ChainMode = "inferred" /\ ChainTrusted

\* A Lookup of r's search (a disjunct of ChainStep): at the position the
\* search picks; the history records a key after a key r knew NOT stored
\* (ChainStopsAtMiss) and a key found stored that no call answered stored.
SearchStep(k, r) ==
    /\ Searching
    /\ ~SearchDecided(r)
    /\ \E i \in DOMAIN Chain :
          /\ i = SearchNext(SearchLo(r), SearchHi(r))
          /\ Chain[i] = k
          /\ chainPastMiss' = (chainPastMiss \/ \E j \in 1..(i - 1) : KnownMiss(r, j))
          /\ chainUntoldHit' = (chainUntoldHit \/ (ChainFindsStored(k) /\ ~AnsweredStored(k)))
          \* the search skips positions by design: its answer is checked by
          \* the inferred walk's invariants
          /\ UNCHANGED <<chainAhead, chainSkipped>>

\* The keys before k in the chain.
ChainBefore(k) == {Chain[j] : j \in {i \in DOMAIN Chain : \E l \in DOMAIN Chain : Chain[l] = k /\ i < l}}

\* Part of Publish: a call that returns (kind ok) records, for each key it
\* answered stored, whether the keys before it in the chain were stored then.
StoreAnswered(G, kind, ans) ==
    /\ prefixAtHit' = IF kind = "ok" /\ StoreModelled
                      THEN [k \in Keys |-> IF \E p \in G.probes : p[1] = k /\ ans[p] = "hit"
                                           THEN ChainBefore(k) \subseteq stored ELSE prefixAtHit[k]]
                      ELSE prefixAtHit
    /\ UNCHANGED <<stored, refuted, failedLoads>>

\* Part of MarkMiss: in the inferred mode the keys given are refuted; the
\* history failedLoads records them apart from refuted, which the walk reads.
StoreRefutes(ks) ==
    /\ refuted' = IF ChainMode = "inferred" THEN refuted \cup ks ELSE refuted
    /\ failedLoads' = IF ChainMode = "inferred" THEN failedLoads \cup ks ELSE failedLoads
    /\ UNCHANGED <<stored, prefixAtHit>>

\* Part of Cleanup: a request's end leaves the store and the refuted keys
\* alone (a failed load refutes its key for every later walk).
CleanupStore(r) == UNCHANGED store

\* The tier evicts: a suffix of the chain, or any one key (PrefixClosed FALSE).
Evictions ==
    IF PrefixClosed THEN {ChainKeys \ ChainPrefix(n) : n \in 0..Len(Chain)}
    ELSE {{k} : k \in ChainKeys}

\* Part of TakeBatch: while the worker takes a batch the tier may evict (a
\* suffix of the chain, or one key); nothing changes unless the config
\* models the store.
StoreMayEvict ==
    /\ stored' \in {stored} \cup (IF StoreModelled THEN {stored \ gone : gone \in Evictions} ELSE {})
    /\ UNCHANGED <<prefixAtHit, refuted, failedLoads>>

\* r's walk, asked again now, answers by inference: it searches, its search
\* is decided with boundary b = SearchHi(r) - 1 (keys 1..b stored), and
\* some key before b was not probed by r (Inferred(r)).  The walk's answer
\* changes nothing, so the inferred walk's invariants are written over the
\* states where it would answer so.
Inferred(r) == {j \in 1..(SearchHi(r) - 2) : ~KnownHit(r, j)}
Infers(r) == Searching /\ SearchDecided(r) /\ Inferred(r) # {}

ChainInit ==
    /\ chainPastMiss = FALSE /\ chainAhead = FALSE /\ chainUntoldHit = FALSE /\ chainSkipped = FALSE
    /\ asked = [r \in Reqs |-> {}]
    /\ posPastMiss = FALSE
    /\ deferred = [r \in Reqs |-> {}]

\* A Lookup's part in the walks (a conjunct of Lookup, after its other
\* parts): every Lookup by r of a chain key is recorded in asked[r]; on its
\* own, it leaves the walks' flags alone; by r's walk at a position i
\* holding k, it must be allowed, and the history records what the table
\* said of the chain's earlier keys then, whether r had looked up every
\* earlier key (asked, not the waiters ChainReached reads), and whether the
\* key the walk found stored was answered stored by a backend call
\* (backendHit, for the generation recalled if served from memory) and not
\* forced.
ChainStep(k, r) ==
    /\ asked' = [asked EXCEPT ![r] = @ \cup ({k} \cap ChainKeys)]
    /\ \/ UNCHANGED chainFlags
       \/ \E i \in DOMAIN Chain :
             /\ Chain[i] = k
             /\ ChainReached(r, i) /\ ChainNoMissBefore(i) /\ ChainWindowOpen(i)
             /\ chainPastMiss' = (chainPastMiss \/ \E j \in 1..(i - 1) : verdict[Chain[j]] = "miss")
             /\ chainAhead' = (chainAhead \/ \E j \in 1..(WindowStart(i) - 1) : verdict[Chain[j]] # "hit")
             /\ chainUntoldHit' = (chainUntoldHit \/ (ChainFindsStored(k) /\ ~AnsweredStored(k)))
             /\ chainSkipped' = (chainSkipped \/ \E j \in 1..(i - 1) : Chain[j] \notin asked[r])
       \/ SearchStep(k, r)

-----------------------------------------------------------------------------
(* Positioned lookups (the vLLM drop-in's per-key scan with key positions, *)
(* statemachine/positions.py)                                               *)
(*                                                                         *)
(* vLLM's scheduler asks for a request's keys one at a time, in chain      *)
(* order, and asks again next step while an answer is "not known yet".     *)
(* With Positioned, every Lookup by r of a chain key not held by r is      *)
(* positioned: from the verdicts r holds for the keys before it            *)
(* (PosDecision) it probes (a Lookup as any other), answers NOT stored     *)
(* without a probe (a key before it is known NOT stored), answers stored   *)
(* without a probe (inferred mode: the search knows a later key stored),   *)
(* or is deferred: no probe, no state, the answer is "ask again".  Only   *)
(* the history records a lookup answered without a probe.  The rule reads *)
(* the keys before it up to the end of the window of the first key r     *)
(* holds no verdict for; a key past that end is deferred.                  *)

\* Lookups of chain keys are positioned (a config turns it on).
Positioned == FALSE

PositionedKey(k) == Positioned /\ k \in ChainKeys

\* The verdict r holds for position j ("none": not held, or not resolved).
PosKnown(r, j) == IF r \in waiters[Chain[j]] THEN verdict[Chain[j]] ELSE "none"

\* The positions before i whose verdict r does not hold.
PosUnknown(r, i) == {j \in 1..(i - 1) : PosKnown(r, j) = "none"}

\* The last position of the window holding position u.
WindowLast(u) == 2 * WindowStart(u) - 2 + FirstWindow

\* r's first unknown position before i (PosUnknown(r, i) not empty).
PosFirstUnknown(r, i) == CHOOSE j \in PosUnknown(r, i) : \A l \in PosUnknown(r, i) : j <= l

\* The last position before i the rule reads: the end of the window of r's
\* first unknown key (i - 1: none, or i inside that window).
PosReach(r, i) ==
    IF PosUnknown(r, i) = {} \/ i - 1 <= WindowLast(PosFirstUnknown(r, i)) THEN i - 1
    ELSE WindowLast(PosFirstUnknown(r, i))

\* A key the rule reads is known NOT stored: no probe, the answer is a miss.
PosMissBefore(r, i) == \E j \in 1..PosReach(r, i) : PosKnown(r, j) = "miss"

\* Past the end of the first unknown key's window: deferred.
PosPastWindow(r, i) == PosUnknown(r, i) # {} /\ WindowLast(PosFirstUnknown(r, i)) < i

\* The inferred rule: the search's next position is probed, a key at or
\* before the last position known stored is inferred stored, one at or
\* after the first known NOT stored answers a miss, any other is deferred.
PosSearchDecision(r, i) ==
    LET lo == SearchLo(r)
        hi == SearchHi(r)
    IN IF i <= lo THEN "inferred_hit"
       ELSE IF i >= hi THEN "past_miss"
       ELSE IF i = SearchNext(lo, hi) THEN "probe"
       ELSE "defer"

\* What the positioned lookup by r of the key at position i does.
PosDecision(r, i) ==
    IF Searching THEN PosSearchDecision(r, i)
    ELSE IF PosMissBefore(r, i) THEN "past_miss"
    ELSE IF PosPastWindow(r, i) THEN "defer"
    ELSE "probe"

\* The Lookup of k by r goes to the probe table: a key without a position,
\* or a positioned one the rule probes.
PositionProbes(k, r) == ~PositionedKey(k) \/ \E i \in DOMAIN Chain : Chain[i] = k /\ PosDecision(r, i) = "probe"

\* A positioned Lookup's part that probes: the history records whether a
\* key before it was then known NOT stored to r (read off the table: r
\* waits on it and its verdict is MISS; not through PosDecision), and the
\* key is no longer deferred.
PositionedProbe(k, r) ==
    /\ asked' = [asked EXCEPT ![r] = @ \cup {k}]
    /\ UNCHANGED chainFlags
    /\ posPastMiss' = (posPastMiss \/ \E i \in DOMAIN Chain :
                          /\ Chain[i] = k
                          /\ \E j \in 1..(i - 1) : r \in waiters[Chain[j]] /\ verdict[Chain[j]] = "miss")
    /\ deferred' = [deferred EXCEPT ![r] = @ \ {k}]

\* A positioned Lookup answered without a probe: nothing changes but the
\* history (a deferred key is recorded, a key answered is no longer
\* deferred); the answer is not a verdict of the table, so out is NoOut.
PositionedAnswer(k, r) ==
    /\ PositionedKey(k)
    /\ \E i \in DOMAIN Chain :
          /\ Chain[i] = k
          /\ PosDecision(r, i) # "probe"
          /\ deferred' = [deferred EXCEPT ![r] = IF PosDecision(r, i) = "defer" THEN @ \cup {k} ELSE @ \ {k}]
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down>>
    /\ UNCHANGED <<chainFlags, asked, posPastMiss, worker, history, store, memory>>

-----------------------------------------------------------------------------
(* Initial state *)

Init ==
    /\ ChainInit
    /\ StoreInit
    /\ phase = [k \in Keys |-> ABSENT]
    /\ gen = [k \in Keys |-> NoGen]
    /\ waiters = [k \in Keys |-> {}]
    /\ verdict = [k \in Keys |-> "none"]
    /\ requests = [r \in Reqs |-> {}]
    /\ batch = {}
    /\ nextGen = 1
    /\ open = {}
    /\ down = FALSE
    /\ out = NoOut
    /\ wstate = UP
    /\ subq = <<>>
    /\ taken = {}
    /\ stuck = {}
    /\ resq = <<>>
    /\ forced = [k \in Keys |-> FALSE]
    /\ told = [p \in Probe |-> "none"]
    /\ sent = [g \in Gens |-> 0]
    /\ sentIn = [g \in Gens |-> "never"]
    /\ applied = [g \in Gens |-> 0]
    /\ stale = FALSE
    /\ moot = {}
    /\ deaths = 0
    /\ backendHit = {}
    /\ mem = [k \in Keys |-> "none"]
    /\ memGen = [k \in Keys |-> NoGen]
    /\ recalled = [p \in Probe |-> NoGen]
    /\ forgot = {}
    /\ backendMiss = {}

-----------------------------------------------------------------------------
(* Scheduler actions *)

\* Every published outcome has been applied: Lookup and Flush drain first.
Drained == resq = <<>>

\* A lookup is served while the manager runs (after Shutdown every call
\* raises), once every published outcome is applied (it drains first).
LookupReady == ~down /\ Drained

\* A new probe: the state gets the next generation and joins this step's batch.
LookupNew(k, r) ==
    /\ phase[k] = ABSENT
    /\ nextGen \in Gens
    /\ phase' = [phase EXCEPT ![k] = PENDING]
    /\ gen' = [gen EXCEPT ![k] = nextGen]
    /\ waiters' = [waiters EXCEPT ![k] = {r}]
    /\ batch' = batch \cup {<<k, nextGen, r>>}
    /\ nextGen' = nextGen + 1
    /\ out' = [key |-> k, req |-> r, ans |-> "none"]

\* What a lookup joining the state of key k answers: its verdict (none,
\* "ask again", until the state is RESOLVED).
JoinAnswer(k) == verdict[k]

\* Joining the key's state: the request waits on it too (no second batch
\* entry, no second probe); the answer is its verdict.
LookupJoin(k, r) ==
    /\ phase[k] # ABSENT
    /\ waiters' = [waiters EXCEPT ![k] = @ \cup {r}]
    /\ out' = [key |-> k, req |-> r, ans |-> JoinAnswer(k)]
    /\ UNCHANGED <<phase, gen, nextGen, batch>>

\* A new state served from memory (the verdict cache): RESOLVED at once with
\* the key's remembered backend answer, never probed.
LookupRecall(k, r) ==
    /\ phase[k] = ABSENT
    /\ mem[k] # "none"
    /\ nextGen \in Gens
    /\ phase' = [phase EXCEPT ![k] = RESOLVED]
    /\ gen' = [gen EXCEPT ![k] = nextGen]
    /\ waiters' = [waiters EXCEPT ![k] = {r}]
    /\ nextGen' = nextGen + 1
    /\ out' = [key |-> k, req |-> r, ans |-> mem[k]]
    /\ UNCHANGED batch

\* What a Lookup of key k does to the verdict and the memory: a state served
\* from memory gets the remembered verdict (history: whose answer it was);
\* a new probe drops the key's entry (it expired or was evicted).
Recalls(k) == phase[k] = ABSENT /\ phase'[k] = RESOLVED
Probes(k) == phase[k] = ABSENT /\ phase'[k] = PENDING
LookupMemory(k) ==
    /\ verdict' = IF Recalls(k) THEN [verdict EXCEPT ![k] = mem[k]] ELSE verdict
    /\ recalled' = IF Recalls(k) THEN [recalled EXCEPT ![<<k, nextGen>>] = memGen[k]] ELSE recalled
    /\ mem' = IF Probes(k) THEN [mem EXCEPT ![k] = "none"] ELSE mem
    /\ memGen' = IF Probes(k) THEN [memGen EXCEPT ![k] = NoGen] ELSE memGen
    /\ UNCHANGED <<forgot, backendMiss>>

\* Request r asks for key k (a request already waiting on k changes nothing:
\* the model leaves that repeated call out).  The answer (out) is the
\* verdict of a RESOLVED state, else none ("ask again").  A positioned key
\* the rule does not probe is answered without a state (PositionedAnswer).
Lookup(k, r) ==
    /\ LookupReady
    /\ r \notin waiters[k]
    /\ \/ /\ PositionProbes(k, r)
          /\ LookupNew(k, r) \/ LookupJoin(k, r) \/ LookupRecall(k, r)
          /\ UNCHANGED store
          /\ requests' = [requests EXCEPT ![r] = @ \cup {k}]
          /\ LookupMemory(k)
          /\ IF PositionedKey(k) THEN PositionedProbe(k, r)
             ELSE ChainStep(k, r) /\ UNCHANGED positionsHistory
          /\ UNCHANGED <<open, down, worker, history>>
       \/ PositionedAnswer(k, r)

\* End of step: submit this step's batch entries whose state is still the
\* PENDING state of the entry's generation, one group per request.  A key is
\* grouped under the request that asked for it if that one still waits,
\* else under any request that waits (the code picks the least id).  A dead
\* worker is revived first (Revive), so Flush needs the worker up.
FlushSubmits(e) == phase[e[1]] = PENDING /\ gen[e[1]] = e[2]

\* The entries of this step's batch that Flush submits.
FlushEntries == {e \in batch : FlushSubmits(e)}

\* A batch goes to a live worker only (a dead one is revived first).
CanSubmit == wstate = UP

\* The phase of e's own probe (e = <<key, gen, req>>): its state's phase, or
\* ABSENT if the key's state is another generation's (or none).
ProbePhaseOf(e) == IF gen[e[1]] = e[2] THEN phase[e[1]] ELSE ABSENT

\* The owner functions Flush chooses among (its guard keeps the allowed ones).
\* An operator of its own so that trace checking (Trace.tla) can offer only
\* the owners a recorded flush used: this set has |Reqs|^|entries| elements.
FlushOwners(entries) == [entries -> Reqs]

Flush ==
    /\ UNCHANGED chainHistory
    /\ UNCHANGED store
    /\ UNCHANGED memory
    /\ ~down
    /\ Drained
    /\ CanSubmit
    /\ batch # {}
    /\ LET entries == FlushEntries
           \* the keys whose PENDING state goes IN_FLIGHT
           moved == {e[1] : e \in {x \in entries : FlushSubmits(x)}}
           gens == {e[2] : e \in entries}
       IN \E owner \in FlushOwners(entries) :
            /\ \A e \in entries :
                 IF e[3] \in waiters[e[1]] \/ ~FlushSubmits(e)
                 THEN owner[e] = e[3]
                 ELSE owner[e] \in waiters[e[1]]
            /\ LET groups == {[req |-> r,
                               probes |-> {<<e[1], e[2]>> : e \in {x \in entries : owner[x] = r}}]
                              : r \in Range(owner)}
               IN /\ subq' = IF groups = {} THEN subq ELSE Append(subq, groups)
                  /\ open' = open \cup groups
                  \* each group a generation is in counts as one submission
                  /\ sent' = [g \in Gens |->
                                sent[g] + Cardinality({G \in groups : \E p \in G.probes : p[2] = g})]
            /\ phase' = [k \in Keys |-> IF k \in moved THEN IN_FLIGHT ELSE phase[k]]
            /\ sentIn' = [g \in Gens |->
                            IF g \in gens
                            THEN ProbePhaseOf(CHOOSE e \in entries : e[2] = g)
                            ELSE sentIn[g]]
    /\ batch' = {}
    /\ out' = NoOut
    /\ UNCHANGED <<gen, waiters, verdict, requests, nextGen, down,
                   wstate, taken, stuck, resq, forced, told, applied, stale, moot, deaths>>
    /\ UNCHANGED backendHit

\* Drain's parts, for an outcome o at the head of the result queue.
\* The probes o concerns: its group's, or for the death marker (which fails
\* every open group) every open group's.
OutcomeProbes(o) == IF o.kind = "died" THEN UNION {G.probes : G \in open} ELSE o.grp.probes
ProbesOf(o, k) == {p \in OutcomeProbes(o) : p[1] = k}

\* o is for the state of key k: one of its probes has the state's generation.
OutcomeMatches(o, k) == Live(k) /\ <<k, gen[k]>> \in OutcomeProbes(o)

\* The probe of o whose answer the state of key k gets.
OutcomeProbe(o, k) == <<k, gen[k]>>

\* The verdict o gives key k: the backend's answer; MISS for a failure,
\* timeout, saturation or the worker's death.
OutcomeAnswer(o, k) == IF o.kind = "ok" THEN o.ans[OutcomeProbe(o, k)] ELSE "miss"

\* o resolves the state of k: it is IN_FLIGHT and some request waits on it.
OutcomeResolves(o, k) == OutcomeMatches(o, k) /\ phase[k] = IN_FLIGHT /\ waiters[k] # {}

\* o reclaims the state of k: it is IN_FLIGHT and nobody waits on it (an orphan).
OutcomeReclaims(o, k) == OutcomeMatches(o, k) /\ phase[k] = IN_FLIGHT /\ waiters[k] = {}

\* History: the generation of the probe of o whose outcome changed key k,
\* read off o's probes, not through the parts above (a slip in them must
\* not hide itself from StaleGenerationDropped).
OutcomeSource(o, k) ==
    IF <<k, gen[k]>> \in OutcomeProbes(o) THEN gen[k] ELSE (CHOOSE p \in ProbesOf(o, k) : TRUE)[2]

\* Whether the verdict cache remembers what outcome o applies: only a
\* backend's answer (kind ok), never a failure's, timeout's, saturation's
\* or dead worker's MISS (no fact about the store).
Remembers(o) == o.kind = "ok"

\* The probes of o whose answer the verdict cache keeps: the probe of each
\* state o resolves or reclaims (its own generation), when o is a backend's
\* answer and the cache is on.
CachedProbes(o) ==
    IF CacheOn /\ Remembers(o)
    THEN {OutcomeProbe(o, k) : k \in {x \in Keys : OutcomeResolves(o, x) \/ OutcomeReclaims(o, x)}}
    ELSE {}

\* What o says of its probe p: the backend's answer, MISS for anything else.
ProbeAnswer(o, p) == IF o.kind = "ok" THEN o.ans[p] ELSE "miss"

\* Apply the oldest published outcome o.
\* - The death marker: every open group fails (WORKER_DIED): each of its
\*   probes still IN_FLIGHT resolves as MISS (or is reclaimed if nobody
\*   waits on it).
\* - A group's outcome: a probe's result applies only to the IN_FLIGHT state
\*   of its own generation: with requests waiting it becomes RESOLVED with
\*   the verdict (MISS unless the kind is ok); with none it is reclaimed (an
\*   orphan).  Anything else is dropped: a state of another generation, a
\*   reclaimed state, an already RESOLVED state (a late answer after a
\*   timeout, or a result racing a MarkMiss).
Drain ==
    /\ UNCHANGED chainHistory
    /\ UNCHANGED store
    /\ ~down
    /\ resq # <<>>
    /\ LET o == Head(resq)
           Resolves(k) == OutcomeResolves(o, k)
           Reclaims(k) == OutcomeReclaims(o, k)
           Changed(k) == Resolves(k) \/ Reclaims(k)
       IN /\ phase' = [k \in Keys |-> IF Reclaims(k) THEN ABSENT
                                      ELSE IF Resolves(k) THEN RESOLVED ELSE phase[k]]
          /\ gen' = [k \in Keys |-> IF Reclaims(k) THEN NoGen ELSE gen[k]]
          /\ verdict' = [k \in Keys |-> IF Reclaims(k) THEN "none"
                                        ELSE IF Resolves(k) THEN OutcomeAnswer(o, k) ELSE verdict[k]]
          /\ forced' = [k \in Keys |-> IF Reclaims(k) THEN FALSE ELSE forced[k]]
          /\ applied' = [g \in Gens |->
                           applied[g] + Cardinality({k \in Keys : Changed(k) /\ OutcomeSource(o, k) = g})]
          /\ stale' = (stale \/ \E k \in Keys : Changed(k) /\ OutcomeSource(o, k) # gen[k])
          /\ open' = IF o.kind = "died" THEN {} ELSE open \ {o.grp}
          \* the scheduler's own verdict for the probes of a dead worker
          \* (their groups were lost: nothing was published for them)
          /\ told' = IF o.kind = "died"
                     THEN [p \in Probe |-> IF p \in OutcomeProbes(o) THEN "miss" ELSE told[p]]
                     ELSE told
          \* the cache keeps the backend's own answer for the generation asked
          /\ LET kept == CachedProbes(o)
                 Kept(k) == \E p \in kept : p[1] = k
                 KeptProbe(k) == CHOOSE p \in kept : p[1] = k
             IN /\ mem' = [k \in Keys |-> IF Kept(k) THEN ProbeAnswer(o, KeptProbe(k)) ELSE mem[k]]
                /\ memGen' = [k \in Keys |-> IF Kept(k) THEN KeptProbe(k)[2] ELSE memGen[k]]
    /\ UNCHANGED <<recalled, forgot, backendMiss>>
    /\ resq' = Tail(resq)
    /\ out' = NoOut
    /\ UNCHANGED <<waiters, requests, batch, nextGen, down,
                   wstate, subq, taken, stuck, sent, sentIn, moot, deaths>>
    /\ UNCHANGED backendHit

\* The manager notices a dead worker (its marker drained) and starts a fresh
\* one, with an empty queue, at its next flush or drain_results.
Revive ==
    /\ UNCHANGED chainHistory
    /\ UNCHANGED store
    /\ UNCHANGED memory
    /\ ~down
    /\ wstate = DEAD
    /\ resq = <<>>
    /\ wstate' = UP
    /\ subq' = <<>>
    /\ taken' = {}
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
                   stuck, resq, history>>

\* The phases whose state Cleanup reclaims once nobody waits on it: an
\* IN_FLIGHT state is kept, so that a new request can join the probe.
CleanupReclaims == {PENDING, RESOLVED}

\* The reverse index once request r finished: r holds no key any more.
RequestsAfterCleanup(r) == [requests EXCEPT ![r] = {}]

\* Request r finished: it stops waiting on every key, and a state nobody
\* waits on any more is reclaimed if its phase is one of CleanupReclaims.
Cleanup(r) ==
    /\ UNCHANGED <<chainFlags, posPastMiss>>
    /\ asked' = [asked EXCEPT ![r] = {}]
    /\ deferred' = [deferred EXCEPT ![r] = {}]
    /\ CleanupStore(r)
    /\ UNCHANGED memory
    /\ ~down
    /\ requests[r] # {}
    /\ LET ks == requests[r]
           Left(k) == waiters[k] \ {r}
           Gone(k) == k \in ks /\ Left(k) = {} /\ phase[k] \in CleanupReclaims
       IN /\ phase' = [k \in Keys |-> IF Gone(k) THEN ABSENT ELSE phase[k]]
          /\ gen' = [k \in Keys |-> IF Gone(k) THEN NoGen ELSE gen[k]]
          /\ waiters' = [k \in Keys |-> IF k \in ks THEN Left(k) ELSE waiters[k]]
          /\ verdict' = [k \in Keys |-> IF Gone(k) THEN "none" ELSE verdict[k]]
          /\ forced' = [k \in Keys |-> IF Gone(k) THEN FALSE ELSE forced[k]]
    /\ requests' = RequestsAfterCleanup(r)
    /\ out' = NoOut
    /\ UNCHANGED <<batch, nextGen, open, down, worker,
                   told, sent, sentIn, applied, stale, moot, deaths>>
    /\ UNCHANGED backendHit

\* The phase a forced MISS leaves a live state of key k in: RESOLVED, or
\* reclaimed (ABSENT) if it is IN_FLIGHT and nobody waits on it.
ForcedPhase(k) == IF phase[k] = IN_FLIGHT /\ waiters[k] = {} THEN ABSENT ELSE RESOLVED

\* The flavour's rule: whether MarkMiss must force the live state of key k
\* (native: every one; vllm: a RESOLVED one only).
MarkMissHonours(k) == MarkMissFlavour = "native" \/ phase[k] = RESOLVED

\* Whether this MarkMiss forces the live state of key k.  The action forces
\* what this part selects; the history forced records, from the keys it
\* was given, those the flavour's rule says it must force, so a MarkMiss
\* that skips one of them is seen (ForcedMissSticks).
MarkMissForces(k) == MarkMissHonours(k)

\* The keys of ks the manager's core is given: every one for the native
\* manager; the vLLM drop-in skips a PENDING or IN_FLIGHT key and passes
\* every other one on, a key without a state too (kvprobe's core counts it
\* and its cache forgets it).
MarkMissPasses(ks) == {k \in ks : MarkMissFlavour = "native" \/ ~Live(k) \/ phase[k] = RESOLVED}

\* A key MarkMiss may be given: one with a state or a remembered answer (a
\* key with neither changes nothing but a counter, and is left out).
Markable(k) == Live(k) \/ mem[k] # "none"

\* Whether MarkMiss(ks) makes the verdict cache forget key k: every key the
\* core is given, with or without a state.
Forgets(ks, k) == k \in MarkMissPasses(ks)

\* Loading the keys ks from the tier failed: force MISS.  A PENDING state is
\* never submitted; an IN_FLIGHT state's late result will be dropped (its
\* generation is moot), and if nobody waits on it, it is reclaimed.  In the
\* vllm flavour only RESOLVED keys are forced: a PENDING or IN_FLIGHT
\* probe's own outcome lands.  The verdict cache forgets every key the core
\* is given (Forgets), a key without a state too: so a key may be given
\* that has a state or a remembered answer.  A key with neither changes
\* nothing but a counter and is left out, which keeps the configs without
\* the cache (no answer is ever remembered) exploring the states they did.
MarkMiss(ks) ==
    /\ UNCHANGED chainHistory
    /\ StoreRefutes(MarkMissPasses(ks))
    /\ ~down
    /\ ks # {}
    /\ \A k \in ks : Markable(k)
    /\ LET \* the keys given that have a state (the others only lose their memory)
           Held(k) == k \in ks /\ Live(k)
           Forces(k) == Held(k) /\ MarkMissForces(k)
           Gone(k) == Forces(k) /\ ForcedPhase(k) = ABSENT
           Hit(k) == Forces(k) /\ ~Gone(k)
           \* history: a key given whose state the flavour says must be forced
           Asked(k) == Held(k) /\ MarkMissHonours(k) /\ ~Gone(k)
       IN /\ phase' = [k \in Keys |-> IF Forces(k) THEN ForcedPhase(k) ELSE phase[k]]
          /\ gen' = [k \in Keys |-> IF Gone(k) THEN NoGen ELSE gen[k]]
          /\ waiters' = [k \in Keys |-> IF Gone(k) THEN {} ELSE waiters[k]]
          /\ verdict' = [k \in Keys |-> IF Gone(k) THEN "none" ELSE IF Hit(k) THEN "miss" ELSE verdict[k]]
          /\ forced' = [k \in Keys |-> IF Gone(k) THEN FALSE ELSE IF Asked(k) THEN TRUE ELSE forced[k]]
          \* history: the in-flight probes this MarkMiss took out of flight
          /\ moot' = moot \cup {gen[k] : k \in {x \in ks : phase[x] = IN_FLIGHT /\ phase'[x] # IN_FLIGHT}}
          \* the cache forgets the keys the core is given (a remembered "stored" whose load failed)
          /\ mem' = [k \in Keys |-> IF Forgets(ks, k) THEN "none" ELSE mem[k]]
          /\ memGen' = [k \in Keys |-> IF Forgets(ks, k) THEN NoGen ELSE memGen[k]]
          \* history: the remembered answers of the keys the core is given
          \* (with or without a state), forgotten now; read off the flavour's
          \* rule, not through Forgets (a slip there must not hide itself)
          /\ forgot' = forgot \cup {<<k, memGen[k]>> : k \in {x \in MarkMissPasses(ks) : mem[x] # "none"}}
    /\ UNCHANGED <<recalled, backendMiss>>
    /\ out' = NoOut
    /\ UNCHANGED <<requests, batch, nextGen, open, down, worker,
                   told, sent, sentIn, applied, stale, deaths>>
    /\ UNCHANGED backendHit

\* Stop the worker and reclaim everything.  The worker's queue is dropped;
\* calls it had started may still finish and publish (nothing drains them).
\* History is kept: the invariants go on checking the states after it.
Shutdown ==
    /\ UNCHANGED <<chainFlags, posPastMiss>>
    /\ asked' = [r \in Reqs |-> {}]
    /\ deferred' = [r \in Reqs |-> {}]
    /\ UNCHANGED store
    /\ ~down
    /\ down' = TRUE
    /\ phase' = [k \in Keys |-> ABSENT]
    /\ gen' = [k \in Keys |-> NoGen]
    /\ waiters' = [k \in Keys |-> {}]
    /\ verdict' = [k \in Keys |-> "none"]
    /\ requests' = [r \in Reqs |-> {}]
    /\ batch' = {}
    /\ open' = {}
    /\ out' = NoOut
    /\ wstate' = STOPPED
    /\ subq' = <<>>
    /\ forced' = [k \in Keys |-> FALSE]
    /\ mem' = [k \in Keys |-> "none"]
    /\ memGen' = [k \in Keys |-> NoGen]
    /\ UNCHANGED <<recalled, forgot, backendMiss>>
    /\ UNCHANGED <<nextGen, taken, stuck, resq, told, sent, sentIn, applied, stale, moot, deaths>>
    /\ UNCHANGED backendHit

-----------------------------------------------------------------------------
(* Worker actions: they touch only the queues and the worker's own groups *)
(* (and the history of what the worker said).                             *)

TakeBatch ==
    /\ UNCHANGED chainHistory
    /\ StoreMayEvict
    /\ UNCHANGED memory
    /\ wstate = UP
    /\ subq # <<>>
    /\ taken' = taken \cup Head(subq)
    /\ subq' = Tail(subq)
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
                   wstate, stuck, resq, history>>

\* Publish the first outcome of a taken group G (up, or stopped: a call in
\* progress when the worker stopped may still finish).
Publish(G, kind, ans) ==
    /\ UNCHANGED chainHistory
    /\ StoreAnswered(G, kind, ans)
    /\ wstate # DEAD
    /\ G \in taken
    /\ resq' = Append(resq, Outcome(G, kind, ans, FALSE))
    /\ told' = Tell(G, ans)
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
                   wstate, subq, forced, sent, sentIn, applied, stale, moot, deaths>>

\* What a call may answer: anything, or what the store holds when the
\* config models it.
Answers(G) ==
    IF StoreModelled THEN {[p \in G.probes |-> IF p[1] \in stored THEN "hit" ELSE "miss"]}
    ELSE [G.probes -> {"hit", "miss"}]

\* History: the backend's call for G returned in time with the answers ans
\* (what it said, recorded apart from what the worker publishes).
CallReturned(G, ans) == backendHit' = backendHit \cup {p \in G.probes : ans[p] = "hit"}

\* The backend answered: one verdict per probe.
CompleteGroupOf(G, ans) ==
    /\ CallReturned(G, ans)
    /\ backendMiss' = IF CacheOn THEN backendMiss \cup {p \in G.probes : ans[p] = "miss"} ELSE backendMiss
    /\ UNCHANGED <<mem, memGen, recalled, forgot>>
    /\ Publish(G, "ok", ans)
    /\ taken' = taken \ {G}
    /\ UNCHANGED stuck

\* The backend call failed (raised, short or long result, bad verdict).
FailGroupOf(G) ==
    /\ UNCHANGED memory
    /\ Publish(G, "fail", AllMiss(G))
    /\ taken' = taken \ {G}
    /\ UNCHANGED <<stuck, backendHit>>

\* The call overstayed the timeout: publish TIMEOUT now; the call is stuck
\* and may answer late (LateAnswer) or never.
\* Any running call may overstay, however many are stuck already: the code
\* runs several groups at once, and they may all time out together (the
\* code's bound, max_stuck_calls + max_concurrent_groups - 1, refines this).
\* MaxStuck = 0 is a manager without a timeout: no call ever times out.
TimeOutOf(G) ==
    /\ UNCHANGED memory
    /\ MaxStuck > 0
    /\ Publish(G, "timeout", AllMiss(G))
    /\ taken' = taken \ {G}
    /\ stuck' = stuck \cup {G}
    /\ UNCHANGED backendHit

\* MaxStuck calls are stuck: the group is answered SATURATED at once, no call.
\* MaxStuck = 0 is a manager without a timeout: no call is stuck, none saturates.
SaturateOf(G) ==
    /\ UNCHANGED memory
    /\ MaxStuck > 0
    /\ Cardinality(stuck) >= MaxStuck
    /\ Publish(G, "saturated", AllMiss(G))
    /\ taken' = taken \ {G}
    /\ UNCHANGED <<stuck, backendHit>>

\* A stuck call returns: its answer is published marked late (also after the
\* worker died or stopped: the call's thread outlives it).
LateAnswerOf(G, ans) ==
    /\ UNCHANGED chainHistory
    /\ UNCHANGED store
    /\ UNCHANGED memory
    /\ G \in stuck
    /\ resq' = Append(resq, Outcome(G, "ok", ans, TRUE))
    /\ stuck' = stuck \ {G}
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
                   wstate, subq, taken, history>>

\* The dispatcher ends: queued and taken groups are lost, stuck calls may
\* still answer late, and the death marker is published.
Die ==
    /\ UNCHANGED chainHistory
    /\ UNCHANGED store
    /\ UNCHANGED memory
    /\ wstate = UP
    /\ deaths < MaxDeaths
    /\ wstate' = DEAD
    /\ subq' = <<>>
    /\ taken' = {}
    /\ resq' = Append(resq, Marker)
    /\ deaths' = deaths + 1
    /\ out' = NoOut
    /\ UNCHANGED <<phase, gen, waiters, verdict, requests, batch, nextGen, open, down,
                   stuck, forced, told, sent, sentIn, applied, stale, moot, backendHit>>

\* The worker's first answer for a group it holds.
WorkerAnswers ==
    \E G \in taken :
        \/ \E ans \in Answers(G) : CompleteGroupOf(G, ans)
        \/ FailGroupOf(G)
        \/ TimeOutOf(G)
        \/ SaturateOf(G)

-----------------------------------------------------------------------------
(* The specification *)

\* After Shutdown, once the worker's last calls have finished (a stuck call
\* may never finish), the system stops: this stutter is the intended end.
Terminated == down /\ taken = {} /\ UNCHANGED vars

\* One operator per action, so that TLC names each step by its action.
CompleteGroup == \E G \in taken : \E ans \in Answers(G) : CompleteGroupOf(G, ans)
FailGroup == \E G \in taken : FailGroupOf(G)
TimeOut == \E G \in taken : TimeOutOf(G)
Saturate == \E G \in taken : SaturateOf(G)
LateAnswer == \E G \in stuck : \E ans \in Answers(G) : LateAnswerOf(G, ans)

\* The engine's calls: any set of keys, each with a state or a remembered
\* answer, may be marked missed at once.
SchedulerSteps ==
    \/ \E k \in Keys, r \in Reqs : Lookup(k, r)
    \/ Flush
    \/ Drain
    \/ Revive
    \/ \E r \in Reqs : Cleanup(r)
    \/ \E ks \in SUBSET Keys : MarkMiss(ks)

WorkerSteps == TakeBatch \/ CompleteGroup \/ FailGroup \/ TimeOut \/ Saturate \/ LateAnswer

SchedulerNext == SchedulerSteps \/ Shutdown
WorkerNext == WorkerSteps \/ Die

Next == SchedulerNext \/ WorkerNext \/ Terminated

\* Weak fairness: the worker takes batches and answers the groups it holds;
\* the scheduler drains published results, revives a dead worker and
\* flushes at the end of every step.  Lookup, Cleanup, MarkMiss, Shutdown
\* and Die are up to the engine (or to fate); a stuck call may never answer.
Fairness ==
    /\ WF_vars(TakeBatch)
    /\ WF_vars(WorkerAnswers)
    /\ WF_vars(Drain)
    /\ WF_vars(Revive)
    /\ WF_vars(Flush)

Spec == Init /\ [][Next]_vars /\ Fairness

\* Deadlock check: without Shutdown and Die (each always enabled, they would
\* make the check vacuous), the only state without a successor must be the
\* end of the bounded model: every generation used, no request, nothing
\* held, nothing queued.  BoundReached allows that state to stutter.
BoundReached ==
    /\ nextGen > MaxGen
    /\ \A r \in Reqs : requests[r] = {}
    /\ \A k \in Keys : phase[k] = ABSENT
    /\ subq = <<>> /\ taken = {} /\ resq = <<>> /\ wstate = UP
    /\ UNCHANGED vars
LiveSteps == SchedulerSteps \/ WorkerSteps
LiveNext == LiveSteps \/ BoundReached

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
    /\ open \subseteq Group
    /\ down \in BOOLEAN
    /\ out \in {NoOut} \cup [key : Keys, req : Reqs, ans : Verdicts]
    /\ wstate \in {UP, DEAD, STOPPED}
    /\ \A i \in DOMAIN subq : subq[i] \subseteq Group
    /\ taken \subseteq Group
    /\ stuck \subseteq Group
    /\ \A i \in DOMAIN resq :
          /\ resq[i].grp \in Group \cup {NoGroup}
          /\ resq[i].kind \in OutcomeKinds
          /\ resq[i].ans \in [resq[i].grp.probes -> {"hit", "miss"}]
          /\ resq[i].late \in BOOLEAN
    /\ forced \in [Keys -> BOOLEAN]
    /\ told \in [Probe -> Verdicts]
    /\ sent \in [Gens -> Nat]
    /\ sentIn \in [Gens -> Phases \cup {"never"}]
    /\ applied \in [Gens -> Nat]
    /\ stale \in BOOLEAN
    /\ moot \subseteq Gens
    /\ deaths \in 0..MaxDeaths
    /\ backendHit \subseteq Probe
    /\ \A k \in Keys : (phase[k] = ABSENT) <=> (gen[k] = NoGen)
    /\ mem \in [Keys -> Verdicts]
    /\ memGen \in [Keys -> Gens \cup {NoGen}]
    /\ recalled \in [Probe -> Gens \cup {NoGen}]
    /\ forgot \subseteq Keys \X (Gens \cup {NoGen})
    /\ backendMiss \subseteq Probe

\* A generation is submitted at most once, and only while its probe is
\* PENDING (never after it was forced to MISS, resolved or reclaimed); at
\* most one outcome per generation is applied.
EnqueueOnce ==
    /\ \A g \in Gens : sent[g] <= 1
    /\ \A g \in Gens : sentIn[g] \in {"never", PENDING}
    /\ \A g \in Gens : applied[g] <= 1

\* For each key, at most one submitted-and-unanswered generation whose state
\* has not reached RESOLVED; a probe made moot by a MarkMiss does not count.
NoDuplicateProbe ==
    \A k \in Keys :
        Cardinality({g \in GensIn(open, k) :
                        /\ g \notin moot
                        /\ ~(gen[k] = g /\ phase[k] = RESOLVED)}) <= 1

\* No effect of an outcome (verdict write, reclaim, phase change) ever fell
\* on a state of another generation.
StaleGenerationDropped == ~stale

VerdictIffResolved ==
    \A k \in Keys : (verdict[k] # "none") <=> (phase[k] = RESOLVED)

\* After MarkMiss(k) the verdict stays MISS until the state is reclaimed.
ForcedMissSticks ==
    \A k \in Keys : forced[k] => verdict[k] = "miss"

\* A RESOLVED key's verdict is MISS if it was forced, else exactly what was
\* published first for that key in its generation's group (hit/miss; miss
\* for a failure, timeout, saturation or the worker's death).
\* A state served from memory is judged by the generation it was recalled
\* from (Source): the remembered answer is that generation's.
Source(k) == IF recalled[<<k, gen[k]>>] # NoGen THEN recalled[<<k, gen[k]>>] ELSE gen[k]

VerdictProvenance ==
    \A k \in Keys : phase[k] = RESOLVED =>
        verdict[k] = IF forced[k] THEN "miss" ELSE told[<<k, Source(k)>>]

\* What a Lookup returns: a forced MISS is answered MISS; once an outcome
\* for the key's probe has been published, the next lookup sees a verdict
\* (visibility: not one step later).
LookupAnswers ==
    out # NoOut =>
        LET k == out.key IN
        /\ forced[k] => out.ans = "miss"
        /\ (Live(k) /\ told[<<k, gen[k]>>] # "none") => out.ans # "none"

ReverseIndexConsistent ==
    \A r \in Reqs, k \in Keys :
        (k \in requests[r]) <=> (phase[k] # ABSENT /\ r \in waiters[k])

\* Safety part of "nothing leaks": no PENDING or RESOLVED state without
\* waiters; a PENDING state is in this step's batch; an IN_FLIGHT state's
\* outcome is coming (queued to or held by a live worker, published, or
\* about to be failed by a published death marker).
NothingLeaks ==
    \A k \in Keys :
        /\ phase[k] \in {PENDING, RESOLVED} => waiters[k] # {}
        /\ phase[k] = PENDING => \E r \in Reqs : <<k, gen[k], r>> \in batch
        /\ phase[k] = IN_FLIGHT => gen[k] \in GensIn(Coming, k)

\* After Shutdown the table, the step's batch, the worker's queue and the
\* open groups are empty, and stay so: nothing the worker publishes later is
\* applied or queued.
AfterShutdownEmpty ==
    down => /\ \A k \in Keys : phase[k] = ABSENT
            /\ \A r \in Reqs : requests[r] = {}
            /\ batch = {} /\ subq = <<>> /\ open = {}
            /\ wstate = STOPPED

\* --- The chain walk's invariants (tla/chain.cfg) ---

ChainTypeOK ==
    /\ chainFlags \in BOOLEAN \X BOOLEAN \X BOOLEAN \X BOOLEAN
    /\ asked \in [Reqs -> SUBSET Keys]
    /\ posPastMiss \in BOOLEAN
    /\ deferred \in [Reqs -> SUBSET Keys]

\* No walk ever looked up a key after a key of its chain known NOT stored.
ChainStopsAtMiss == ~chainPastMiss

\* No walk ever looked up a key of a window while a key before that window
\* was not known stored.
ChainWindowWaits == ~chainAhead

\* Every key a walk found stored was answered stored by a backend call for
\* that generation (backendHit), and not forced.
ChainHitsAnswered == ~chainUntoldHit

\* No walk looked up a key before its request had looked up every earlier
\* key of the chain (asked: what r's Lookups did, not the waiters the
\* walk's guard reads); so a walk's leading hits are keys it looked up.
ChainWalksInOrder == ~chainSkipped

\* --- Positioned lookups (tla/positions.cfg) ---

\* No positioned lookup probed a key while a key before it in the chain was
\* known NOT stored to its request (posPastMiss: read off the table when
\* the probe was made, not through PosDecision, which decides it).
PositionsStopAtMiss == ~posPastMiss

\* --- The inferred walk's invariants (tla/chain-inferred.cfg) ---

StoreTypeOK ==
    /\ stored \subseteq Keys /\ refuted \subseteq Keys /\ failedLoads \subseteq Keys
    /\ prefixAtHit \in [Keys -> BOOLEAN]

\* Every key a walk would infer stored was in the store, with every key
\* before it, when the backend last answered the walk's boundary key stored
\* (true of a prefix-closed store; chain-inferred-holes.cfg shows it fails
\* when the store has holes).
InferredStored == \A r \in Reqs : Infers(r) => prefixAtHit[Chain[SearchHi(r) - 1]]

\* A search answers only at a boundary its request verified: the boundary
\* key answered stored by a call (not forced; a key served from memory by
\* the call for the generation it was recalled from), or no key stored, and
\* the next key known NOT stored, or the chain's end.  Written on the table
\* (r waits on the key, and its verdict), not through KnownHit and
\* KnownMiss, which the search decides by.
InferredBoundaryVerified ==
    \A r \in Reqs : Searching /\ SearchDecided(r) =>
        LET b == SearchHi(r) - 1
            Told(i, v) == r \in waiters[Chain[i]] /\ verdict[Chain[i]] = v
        IN /\ b = 0 \/ (Told(b, "hit") /\ <<Chain[b], Source(Chain[b])>> \in backendHit /\ ~forced[Chain[b]])
           /\ b = Len(Chain) \/ Told(b + 1, "miss")

\* No walk infers across a key whose load failed: after a failed load the
\* chain is walked exactly.  Read off failedLoads, the history that never
\* shrinks, not refuted, the state the walk decides by.
RefutedWalkedExactly == \A r \in Reqs : Infers(r) => failedLoads \cap ChainKeys = {}

\* No key the search's answer counts stored (positions 1..SearchHi(r) - 1 of
\* a decided search) is one its request knows NOT stored: written on the
\* table (r waits on the key, its verdict is MISS), not through KnownMiss,
\* SearchLo or Inferred, the operators the search decides by.
InferredAnswerNoKnownMiss ==
    \A r \in Reqs : Searching /\ SearchDecided(r) =>
        \A j \in 1..(SearchHi(r) - 1) : ~(r \in waiters[Chain[j]] /\ verdict[Chain[j]] = "miss")

-----------------------------------------------------------------------------
(* Invariants that pin an output or a verdict to what happened elsewhere   *)
(* (issue 26): each reads history written by another action than the one  *)
(* it checks.                                                              *)

\* A lookup returns exactly its key's state's verdict: none ("ask again")
\* until an outcome of the state's generation was applied or the key was
\* forced, then that verdict (forced: MISS).
LookupReturnsVerdict ==
    out # NoOut =>
        LET k == out.key IN
        /\ out.ans = verdict[k]
        /\ (out.ans = "none") <=>
              ~(forced[k] \/ (Live(k) /\ (applied[gen[k]] > 0 \/ recalled[<<k, gen[k]>>] # NoGen)))

\* A verdict is what the backend said: a RESOLVED key that was not forced is
\* HIT exactly when the call for its generation returned "stored" for it in
\* time; so a saturated (no call), failed, timed-out or dead group's keys
\* are MISS.  backendHit is written only where a call returns, never by
\* what the worker publishes.
VerdictFromBackend ==
    \A k \in Keys : (phase[k] = RESOLVED /\ ~forced[k]) =>
        ((verdict[k] = "hit") <=> (<<k, Source(k)>> \in backendHit))

\* The verdict cache (cache.cfg; docs/cache.md): a remembered "stored" is a
\* backend "stored" answer for that key and generation, a remembered "not
\* stored" a backend "not stored" answer (never a failure's MISS); no entry
\* outlives the MarkMiss that forgot it; and a state served from memory that
\* was not forced since holds the backend's answer for the generation it was
\* recalled from.  backendMiss, like backendHit, is written only where a
\* call returns.
BackendSaid(k, g, v) == <<k, g>> \in (IF v = "hit" THEN backendHit ELSE backendMiss)
CacheProvenance ==
    /\ \A k \in Keys : mem[k] # "none" =>
          /\ BackendSaid(k, memGen[k], mem[k])
          /\ <<k, memGen[k]>> \notin forgot
    /\ \A k \in Keys : (phase[k] = RESOLVED /\ ~forced[k] /\ recalled[<<k, gen[k]>>] # NoGen) =>
          BackendSaid(k, recalled[<<k, gen[k]>>], verdict[k])

\* The verdict cache keeps only an answer that was applied to its own
\* generation's state: never one of a generation a MarkMiss made moot
\* (moot, written by MarkMiss), and always the first outcome published for
\* its probe (told, written where the worker publishes), never a late
\* answer after a timeout.  Drain, which writes the memory, writes neither.
CacheAnswerApplied ==
    \A k \in Keys : mem[k] # "none" =>
        /\ memGen[k] \notin moot
        /\ told[<<k, memGen[k]>>] = mem[k]

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

\* While the scheduler keeps asking (PositionsSpec: weak fairness on each
\* request's lookup of each chain key), a deferred key is eventually no
\* longer deferred: probed, or answered without a probe (a key before it
\* known NOT stored, or inferred stored), or its request finished; unless
\* the model's generations ran out (no new probe can be made: a bound of
\* the model, not of the manager).
DeferredServed ==
    \A r \in Reqs : \A k \in Keys : (k \in deferred[r]) ~> (k \notin deferred[r] \/ nextGen > MaxGen)

\* The scan's re-ask: each request's lookup of each chain key is taken
\* while it stays possible and would change something.
PositionsSpec == Spec /\ \A r \in Reqs : \A i \in DOMAIN Chain : WF_vars(Lookup(Chain[i], r))

=============================================================================
