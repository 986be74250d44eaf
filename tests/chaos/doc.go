// Package chaos is sqllock's history-checked fault testing: workers contend
// for a few lock names and record what they believed and did, faults are
// injected between them and the database, and a checker reads the history
// together with the guarded data left in the database.
//
// The checker fails a run on a double holder (an older acquisition still
// trusting its lock after a newer one was granted), a fencing token that
// does not grow, a guarded write accepted after a takeover, and a counter
// that disagrees with the writes that committed (a lost or duplicated
// update).
//
// The semaphore scenarios (strategies "semaphore" and, with Options.Fair,
// "fairsem", semaphoreLimit permits per name) are checked by
// [CheckSemaphore] instead: no more than the limit of
// acquisitions of a name certainly held at one instant, no token granted
// twice, tokens that grow; their holders' guarded writes may interleave, so
// the data is not checked. TestSemaphoreSetLimitChaos resizes a name
// (Semaphore.SetLimit, between 1 and 4) while workers take its permits
// through the resetting fault proxy, and [CheckSemaphore] then also checks
// that every grant fits a limit that could have been in force at its
// moment (the most permissive one, since a SetLimit takes effect somewhere
// within its call, and a failed one perhaps not at all). The fair scenarios ("fair", "fairsem") are also
// checked by [CheckFIFO]. Their kept runs' meta.json names the strategy,
// and a reader must check them with that model ([CheckKept] picks it).
// The read/write scenarios are checked by [Check] itself, which applies the
// read/write model ([CheckRW]) to names with read-side acquisitions, and
// the model of holds that change sides ([CheckRWSides]: downgrades,
// upgradeable reads, upgrades, strategy "rwsides") to names where they
// happen.
//
// The values holders set on their locks (Lock.SetValue, read with
// Table.Value) are checked by [CheckValue], on the history of a scenario of
// their own (TestValueChaos: holders through a resetting proxy, leases
// broken by an operator, a reader): a read shows its token's latest value
// certainly written or one being written, never a value written under
// another token, nor a token older than a grant that had returned, and no
// write is reported done after its hold's release, its lease's break or a
// later token's grant.
//
// Every scenario runs a [sqllock.Reaper] beside its workers, as production
// runs one, with a short interval and small batches (meta.json's
// reaper_interval_ns and reaper_batch), on a pool of its own.
//
// A check that needs the workload to have reached a state (enough grants
// and writes, a fault injected, a paused holder taken over, a FIFO waiter
// granted with its ticket) does not hope that it happens within the
// scenario's duration: past it, the scenario goes on, adding workers to
// the goroutine scenarios, until every such state is reached, for at most
// a minute; only then does the check fail.
//
// # Kept runs
//
// With the environment variable SQLLOCK_CHAOS_KEEP set to a directory, every
// scenario of TestChaos writes its complete history and the guarded data it
// left into a directory of its own,
//
//	$SQLLOCK_CHAOS_KEEP/<database>-<strategy>-<fault>/
//
// for example postgres-table-sigkill, replacing the files of an earlier run
// there, so that a checker other than [Check] can check the same runs. When
// the variable is unset nothing is written. [Kept.Write] writes such a
// directory and [ReadKept] reads one. It holds three UTF-8 JSON files:
//
//   - meta.json: one JSON object describing the scenario. It is written
//     last: a directory without it holds an incomplete run.
//   - history.jsonl: the events of all the scenario's workers, one JSON
//     object a line, in time order. It includes the events of worker
//     processes that were stopped or killed, up to the last line such a
//     process wrote in full.
//   - data.jsonl: the guarded data, one JSON object a line, read from the
//     database once every worker had stopped.
//
// Every record has a "kind" field naming what it is, and every field listed
// below for its kind is always present (zero or empty when it does not
// apply). This is format 4. Format 3 had no downgrade and upgrade events
// (and their completions) and no field upgradeable. Format 2 had no renewed, enqueued,
// ticket-lost and dequeued events (the fair strategies wrote an enqueued
// event that format 2 did not list), none of the fields shared, try,
// ticket and trust_until_ns (so the read side of a read/write lock was not
// recorded), none of trust_margin_ns, limit, reaper_interval_ns and
// reaper_batch in meta.json, wrote 1 as meta.json's format, and numbered
// operations per process rather than per worker; format 1 had no set
// events and no set field. Fields may be added to it, which a reader should ignore; any other change
// (a new kind, a field's meaning) comes with a new "format" in meta.json.
//
// Units and clocks: every time is an integer number of nanoseconds since the
// Unix epoch (fields ending in _ns), read with time.Now by the process that
// recorded it. That is the host's real-time (wall) clock, which all the
// worker processes of a run share because they all run on the test's host;
// it is not monotonic, and the suite assumes it is not stepped during a run.
// Durations are integer nanoseconds. The database server's clock, on which
// leases expire, appears nowhere. A token is the fencing token of an
// acquisition (sqllock's Lock.Token): a positive integer, per lock name,
// that a correct lock makes grow with every grant.
//
// # meta.json
//
// Fields:
//
//   - kind: "meta".
//   - format: 4.
//   - scenario: "<database>/<strategy>/<fault>", the name of the scenario
//     under TestChaos.
//   - database: "postgres", "mysql" (MariaDB or MySQL) or "tidb".
//   - strategy: "table", "optimistic" (leases with a TTL), "pessimistic"
//     (a row lock held by the lock's own open transaction), "fair" (the
//     lock table with FIFO tickets: sqllock.TableOptions.Fair; also checked by
//     [CheckFIFO]), "semaphore" (limit permits per name; checked by
//     [CheckSemaphore]), "fairsem" (the semaphore with FIFO tickets),
//     "rwlock" (a read/write lock: leases with a TTL, two turns in three on
//     the read side, recorded with "shared": true on the acquisition's
//     acquire and acquire-ok), "election" (leader election on the lock
//     table: an acquisition is a won election, its token the term, a
//     release a resignation; checked by [CheckElection]), "multi" (the
//     lock table taking sets of names at once; see the set events) or
//     "rwsides" (the read/write lock whose holds change sides: one turn in
//     three a plain read as in "rwlock", one a write that downgrades
//     after its guarded write and holds the read side, one an upgradeable
//     read ("shared" and "upgradeable": true) that upgrades, trusts and
//     writes as the writer, and one time in two downgrades; see the
//     downgrade and upgrade events; checked by [CheckRWSides]).
//   - fault: "none", "conn-kill", "proxy", "sigstop", "sigkill" or "restart"
//     (CONTRIBUTING.md describes each).
//   - start_ns: just before the first worker started. end_ns: just after
//     the guarded data was read. Every event's at_ns lies between them.
//   - start, end: the same two instants in RFC 3339, UTC, for people.
//   - ttl_ns: the lease TTL of every strategy but pessimistic, whose
//     locks have none (a pessimistic lock lasts as long as its
//     transaction): 0 for it.
//   - trust_margin_ns: how much earlier than the TTL a holder stops
//     trusting its lease: a holder trusts a lease until the start of the
//     statement that granted or last renewed it, on its own monotonic
//     clock, plus ttl_ns minus trust_margin_ns (sqllock's trust window,
//     min(TTL/10, 1s)); 0 without a TTL.
//   - limit: the permits per name of the semaphore strategies; 0 for the
//     others.
//   - reaper_interval_ns, reaper_batch: the interval and batch size of the
//     sqllock.Reaper that ran beside the workers.
//   - keepalive_ns: the keep-alive interval of pessimistic locks.
//   - idle_timeout_ns: the server's idle-in-transaction timeout set on the
//     pessimistic workers' sessions in the process scenarios, which ends a
//     stopped holder's session; 0 if none was set.
//   - names: the lock names, which are also the names of the counters.
//   - workers: the worker ids found in the history, sorted as strings
//     (four, or more when workers were added to reach a checked state).
//   - faults: the faults injected, counted by a description such as
//     "connections killed" (an object; empty for "none").
//   - injected: the holders stopped or killed (the sigstop and sigkill
//     scenarios; an empty array otherwise), each an object with fault
//     ("sigstop" or "sigkill"), worker, name and token (the acquisition it
//     held, granted just before), at_ns (just before SIGSTOP or SIGKILL was
//     sent) and resumed_ns (just after SIGCONT was sent; 0 for sigkill).
//   - events: the number of lines of history.jsonl.
//   - violations: the number of violations [Check] found in this run
//     (0 for a passing run).
//
// # history.jsonl
//
// Each line is one event, with these fields:
//
//   - kind: what happened; one of the event kinds below.
//   - worker: the worker that recorded it. A worker takes turns in one
//     goroutine, one turn at a time. Workers named pNgM (scenarios none,
//     conn-kill, proxy and restart) are goroutine M of locker N, two
//     lockers with a connection pool each, all in the test's process;
//     workers named cN (sigstop, sigkill) are each an operating-system
//     process of their own, numbered in order of starting (a killed
//     process is replaced by a new number).
//   - op: the operation the event belongs to, numbered per worker from 1
//     (1, 2, 3… for each worker, whichever process or goroutine it is).
//     An operation is an invoke event followed by at most one completion
//     event with the same worker and op; the point events trusted and lost
//     carry the op of the operation during which they were recorded,
//     renewed and the ticket events the op of the acquisition's acquire.
//   - name: the lock name (one of meta.json's names).
//   - token: the token of the acquisition the event is about; 0 on acquire
//     and acquire-fail (no token yet).
//   - value: on write-ok, the counter value the write wrote; on set-limit,
//     the limit asked for; 0 otherwise.
//   - at_ns: when the event happened. An invoke's time is taken before the
//     call starts and a completion's after it returned, so the operation
//     itself lies within [invoke at_ns, completion at_ns].
//   - error: on a failure, an unknown outcome or a loss, the error message
//     (free text, for people; it may be long); "" otherwise.
//   - set: on the set events, the names of the set, separated by commas;
//     "" otherwise (and name is "").
//   - shared: true on the acquire and acquire-ok of an acquisition of the
//     read side of a read/write lock (AcquireShared, TryAcquireShared);
//     false otherwise (the write side, and every other strategy).
//     Also true on those of an upgradeable read (rwsides), with
//     upgradeable.
//   - upgradeable: true on the acquire and acquire-ok of an upgradeable
//     read (AcquireUpgradeable, TryAcquireUpgradeable; shared is true
//     too); false otherwise.
//   - try: true on an acquire (and set) event of a call that does not wait
//     (TryAcquire, TryAcquireShared, TryAcquireUpgradeable, TryAcquireAll:
//     every 4th turn); false for one that waits (Acquire, AcquireShared,
//     AcquireUpgradeable, AcquireAll, Campaign).
//   - ticket: on enqueued, ticket-lost and dequeued, the FIFO ticket's id,
//     as the database assigned it (the ticket row's key; tickets of a name
//     are served in id order); 0 otherwise.
//   - trust_until_ns: on acquire-ok and renewed of a lease (every strategy
//     but pessimistic), the end of the holder's trust window from then on,
//     bounded from above: the holder stops trusting the lease at the start
//     of the granting or renewing statement plus ttl_ns minus
//     trust_margin_ns, and that statement started before at_ns, so this is
//     at_ns + ttl_ns - trust_margin_ns. No trusted event of the acquisition
//     comes after the largest trust_until_ns of its acquire-ok and renewed
//     events (Check: "trust window"). 0 otherwise.
//
// Lines are sorted by at_ns; events with equal times keep the order in
// which they were recorded, and each worker's events are in the order it
// recorded them.
//
// Event kinds:
//
//   - acquire (invoke): the worker asks for the lock name: Acquire, waiting
//     at most 3×TTL+2s, or on every 4th turn TryAcquire, which does not
//     wait ("try": true). The election's Campaign is an Acquire.
//   - acquire-ok (completion): a grant. The acquisition (name, token)
//     belongs to worker from a moment within [acquire at_ns, acquire-ok
//     at_ns] on. Each acquisition has exactly one acquire-ok.
//   - acquire-fail (completion): not granted (held by another owner, the
//     wait ran out, or an error). sqllock promises that a failed call
//     leaves no lease behind.
//   - trusted (point): the holder of (name, token) checked that it still
//     holds the lock and found it did, so the lock was held at at_ns (the
//     time is taken before the check). Table and optimistic: the lock's
//     context was not done after the turn's hold pause (op of the acquire).
//     Pessimistic: a statement of the lock's own transaction succeeded (op
//     of the write).
//   - lost (point): the holder of (name, token) learned that the lock is no
//     longer its own: its lock's context was done after the hold pause (op
//     of the acquire; error is the context's cause), the guard refused its
//     write (op of the write), or its release found the lock taken over (op
//     of the release). It never trusts that acquisition again.
//   - write (invoke): a guarded write begins: a read-modify-write of the
//     counter name with the acquisition (name, token). at_ns is before its
//     transaction begins. A worker writes at most once per acquisition
//     (once unless killed first), even after a loss (the guard must then
//     refuse it), so (name, token) names one write.
//   - write-ok (completion): the write committed; value is the counter value
//     it wrote, which data.jsonl holds as a write record.
//   - write-fail (completion): the write certainly did not commit.
//   - write-unknown (completion): the outcome of the write's commit is
//     unknown (the connection failed after COMMIT was sent; see
//     sqllock.ErrOutcomeUnknown). data.jsonl settles it: the write committed
//     if and only if a write record with its name, token and worker exists.
//   - release (invoke): the holder releases (name, token).
//   - release-ok (completion): released: the lease is gone (table,
//     optimistic), or the lock's transaction committed (pessimistic).
//   - release-fail (completion): the release failed. With error "sqllock:
//     lock lost" (followed by a lost event) another owner had taken the lock
//     over; otherwise the lock is left to expire (a lease after its TTL; a
//     pessimistic lock when the server ends its session).
//   - renewed (point): a renewal of the lease (name, token) succeeded;
//     trust_until_ns is the end of the new trust window (see above). The
//     renewal runs in the background, on the locker's own schedule, so a
//     renewed event may come before the acquire-ok of its acquisition (and
//     a process killed between the two leaves a renewed event without its
//     grant, which a checker should ignore) and up to the release.
//   - enqueued (point; fair and fairsem): the waiter of the acquire with
//     this op took FIFO ticket "ticket" for name: the Acquire was refused
//     at first and took its place in the database's queue. at_ns is after
//     the ticket was committed. Once a ticket is taken, no Acquire that
//     begins later may be granted before it while the ticket is live
//     ([CheckFIFO]). A ticket lives for the TTL from when it was taken or
//     last renewed (the waiter's process renews it in the background, like
//     a lease); an expired ticket is skipped by the queue. A grant to a
//     waiter consumes its ticket: the ticket of an acquire-ok is that of
//     the last enqueued event of its op.
//   - ticket-lost (point): the waiter found its ticket not live (it expired
//     while its renewals failed or its process was stopped, or its commit
//     failed after all); it takes another, at the end of the queue: an
//     enqueued event with a new ticket follows, unless that fails.
//   - dequeued (point): the waiter gave its ticket up, its Acquire ending
//     without a grant (its context ended): the ticket was deleted, or, with
//     error set, the deletion failed and the ticket lives until it expires.
//     The acquire-fail follows.
//   - set (invoke), set-ok and set-fail (completion): in the multi
//     scenarios (strategy "multi"), each turn asks for a set of names at
//     once (sqllock's Table.AcquireAll, or on every 4th turn
//     TryAcquireAll). The set event is followed, at the same at_ns and op,
//     by an acquire event per name; a grant by an acquire-ok per name
//     (each with its token), then set-ok; a refusal or failure by
//     set-fail alone. The rest of the turn is a single lock's for each
//     name, except that one transaction, guarded by every lock of the set
//     (LockSet.Guard), writes all the set's counters (a write event per
//     name, and their completions), and one release operation (a release
//     event per name, and their completions) releases the whole set. A
//     guard or release refused because the set was lost records a lost
//     event for each lock of the set (the worker trusts none of them
//     again). A
//     set-ok must come with exactly one acquire-ok of each of its names
//     and no other, and a set-fail with none (Check: "partial set").
//   - downgrade (invoke), downgrade-ok and downgrade-fail (completion): in
//     the rwsides scenarios, the holder of (name, token) turns its write
//     hold into a read hold (Lock.Downgrade, one statement, bounded by
//     10 s); the change takes effect at one moment within the operation.
//     downgrade-ok's token is the one the lock reports afterwards (the
//     same: a hold keeps its token). After downgrade-fail (error set; with
//     "sqllock: lock lost" a lost event follows) the side is unknown, and
//     the worker only releases.
//   - upgrade (invoke), upgrade-ok and upgrade-fail (completion): the
//     holder of an upgradeable read (name, token) becomes the writer
//     (Lock.Upgrade, which waits, at most 3×TTL+2s, for the readers beside
//     it to leave); as for downgrade. A failed upgrade may have happened
//     all the same: the side is unknown, and the worker releases without
//     writing. A trusted event follows upgrade-ok, then the guarded write.
//   - set-limit (invoke), set-limit-ok and set-limit-fail (completion):
//     an operator's Semaphore.SetLimit of name to the limit in value (on
//     set-limit; 0 on its completion). It takes effect at one moment
//     within the operation; after set-limit-fail (error set) it may or may
//     not have. Only TestSemaphoreSetLimitChaos records them, and it keeps
//     no files; [CheckSemaphore] judges each grant by them.
//
// An invoke without a completion is an operation whose outcome the worker
// never recorded because its process was killed: forever pending, unless
// data.jsonl settles it (a write). A killed holder's acquisition simply ends
// with its lease (after the TTL) or with its session (pessimistic).
//
// A worker's turn, with A, W and R its operations:
//
//  1. acquire(A), then acquire-ok(A) with a token T, or acquire-fail(A),
//     which ends the turn.
//  2. A pause of up to the hold time. Table and optimistic: trusted(A), or
//     lost(A) if the lock's context is done. Pessimistic: lost(A) if it is
//     done, else nothing.
//  3. Table and optimistic: write(W); in a transaction of its own it reads
//     the counter, pauses, calls Lock.Guard (the fence: in the transaction,
//     it checks on the database clock that (name, T) is still the live
//     lease and share-locks the lock's row until the transaction ends; if
//     it refuses, lost(W) then write-fail(W)), sets the counter to the value
//     read plus one and its token to T, inserts the write record, and
//     commits: write-ok(W), write-fail(W) or write-unknown(W). Then
//     release(R), and release-ok(R) or release-fail(R).
//  4. Pessimistic, instead of 3: write(W); the same statements run in the
//     lock's own transaction (trusted(W) once the read succeeds; no
//     Lock.Guard), then release(R) commits that transaction: release-ok(R)
//     or release-fail(R), and only then write-ok(W), write-fail(W) or
//     write-unknown(W). The write commits exactly when the release does,
//     and W's interval contains R's.
//
// # data.jsonl
//
// The counters come first, sorted by name, then the write records, sorted
// by name, value, token and worker. Kinds:
//
//   - counter: fields kind, name, value (the counter: one per committed
//     increment in a correct run) and token (the token of the last write
//     that committed; 0 if none).
//   - write: one row of the write log, inserted in the same transaction as
//     the counter update it describes: fields kind, name, value (the
//     counter value the write wrote), token (the writer's token) and worker
//     (the writer). The log records no commit time; value gives the commit
//     order of a correct run.
//
// # What Check verifies
//
// For comparison with another checker, per lock name: (1) no trusted event
// of an acquisition at or after the acquire-ok of an acquisition with a
// greater token, and no token granted twice; (2) an acquisition asked for
// (acquire at_ns) after another's acquire-ok has a greater token; (3) no
// write-ok of a write whose write event came after the acquire-ok of a
// greater token; (4) the counter equals the number of write records, whose
// values are 1 to n, with tokens not decreasing in value order; (5) every
// write-ok has its write record (same name, value, token and worker), and
// the number of write records lies between the number of write-ok and that
// plus the writes of unknown outcome (write-unknown or no completion); (6)
// a set-ok comes with exactly one acquire-ok of each name of its set and
// no other, a set-fail with none; (7) no trusted event after the end of
// its acquisition's trust window (the largest trust_until_ns of its
// acquire-ok and renewed events). On a name with read-side acquisitions,
// (1) applies to conflicting pairs only (a writer and anyone). On a name
// whose holds change sides (an upgradeable read, a downgrade or an
// upgrade), (1) applies to the side each acquisition held at the moment
// ([CheckRWSides]): no entry into a side (grant, upgrade) while an earlier
// acquisition trusted after it on a conflicting side, no two acquisitions
// trusted at an instant by which both were in conflicting sides, a
// completed change keeps its token, and an upgrade's token exceeds those
// of the writers and upgradeable reads granted before it; in (3) a plain
// reader granted while the writer was still an upgradeable read does not
// make its write stale. For the
// semaphores, [CheckSemaphore] checks (7), tokens granted once, (2), and
// that no more than limit acquisitions are certainly held at one instant
// (from acquire-ok to their last trusted event), and, in histories with
// set-limit events, that at some moment between each acquire and its
// acquire-ok fewer other acquisitions were certainly held than a limit
// that could have been in force then (the limit of a set-limit that began
// by then and was not certainly replaced: by a set-limit-ok whose
// set-limit came after its completion and which completed by then); [CheckFIFO] checks the
// fair strategies' ticket order; [CheckKept] runs the checkers of a kept
// run's strategy, and gives the verdict TestChaos gave live.
//
// In a linearizability checker (a porcupine model of a fenced mutex, say),
// each operation runs from its invoke's at_ns to its completion's; a write
// of unknown outcome that data.jsonl shows committed has no return time
// (it may take effect at any moment after its invoke), and one that did not
// commit can be left out.
package chaos
