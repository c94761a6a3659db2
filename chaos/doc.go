// Package chaos is semrun's chaos harness: a test that runs many real
// semrun processes against real redis-server processes on loopback, breaks
// things while they run, and checks afterwards that semrun kept its
// promises. All its code is in its tests.
//
// # Running it
//
// The nemeses run with -chaos only. The README's test command runs this
// package's own tests of the checks, and CI runs the short run as a step
// of its own, after the other packages' tests (.ci/run): its timing is
// then its own. Every nemesis gets about 15 seconds; six run at once, in
// about 100 seconds on 2 CPUs:
//
//	go test -race -count=1 ./chaos -chaos
//	go test -race -count=1 -v ./chaos -chaos                             # with the figures
//	go test -race -count=1 -v ./chaos -chaos -run TestChaos/redis-pause  # one nemesis
//
// The long run gives each nemesis at least ten minutes (the crowd lines up
// once, as in the short run), makes 1000 SIGKILL trials, and goes on until
// the nemeses have made 100,000 grants in all (about 20 minutes on 2
// CPUs):
//
//	go test ./chaos -run TestChaos -timeout 0 -v -args -chaos.long
//
// -chaos.long sets -chaos.duration=10m -chaos.kill-trials=1000
// -chaos.hold-min=20ms -chaos.hold-max=200ms -chaos.grants=100000
// -chaos.hold-crowd=200 and -chaos; a flag given as well wins. The short
// run holds each child 100ms to 1s instead, so that its grants cost a
// machine that runs other work too less. Six nemeses run at once unless
// -parallel is given: with -parallel 1 they run one after another, each
// with the whole machine; with -parallel 24, all at once. The harness
// builds semrun and the child (chaos/child) without -race whatever the
// test is built with: a child costs a few milliseconds of CPU to start,
// not the tens the race detector adds. -chaos.keys=K gives each nemesis K keys
// (kill9 4K, the hold trials 2K; several-keys always has its three);
// -chaos.crowd=L makes the crowd's line L
// waiters long (200), -chaos.hold-crowd=L the hold crowd's (40).
// -chaos.seed=S repeats a run's random choices (the seed is
// logged), though not the processes' timing. Like the other tests, it
// skips when redis-server is not installed, and fails instead when CI=true.
//
// # What it does
//
// Each nemesis is a subtest with its own redis-server, its own keys and, for
// the network faults, its own TCP proxy between semrun and Redis. Six
// workers per key (N=2; key-capacity: N=4; kill9: four keys of N=3, four
// workers each) run, again and again,
//
//	semrun -k KEY -n N [--weight 2] --ttl 2s --kill-after 500ms --connect-timeout 2s -- CHILD RUN HOLD CODE
//
// where CHILD is the child (chaos/child), told its run. Under kill9,
// redis-restart-empty, drop-replies, key-revoke and key-capacity, the
// first worker of each key asks for two permits (--weight 2), and so two
// slots. The child
// notes its start on CLOCK_MONOTONIC first, tells the harness over a unix
// socket its start, its fencing token and its key (SEMRUN_FENCING_TOKEN,
// SEMRUN_HELD_KEY), every key's token (SEMRUN_FENCING_TOKENS), and its
// slots (SEMRUN_SLOT, SEMRUN_SLOTS, SEMRUN_KEY_SLOTS) and their names
// (SEMRUN_SLOT_NAME, SEMRUN_SLOT_NAMES), holds for HOLD, notes
// its end and the status it exits with, tells that too, and exits with
// CODE. On SIGTERM it tells its end and exits 143 at once. A child killed by SIGKILL says nothing: its end is
// the moment the harness reads the end of its connection, later than its
// real end.
//
// The nemeses:
//
//	kill9                 SIGKILL of a random semrun whose child runs; the child must be gone (target 100ms)
//	redis-pause           SIGSTOP of redis-server for 0.5 to 3 TTLs, then SIGCONT
//	redis-restart-empty   SIGKILL of redis-server, restarted empty on the same port
//	proxy-cut             every connection between semrun and Redis closed at once
//	proxy-blackhole       for 0.5 to 3 TTLs nothing is forwarded; then each held connection is
//	                      either closed or delivered late, by the toss of a coin
//	script-flush          SCRIPT FLUSH: every semrun must load its scripts again
//	late-replies          for 0.5 to 3 TTLs every reply reaches semrun 0.5 to 1.5 TTLs after
//	                      Redis sent it: grants come back late and must not start a command
//	drop-replies          for 0.5 to 3 TTLs a quarter of Redis's replies are dropped, closing
//	                      their connection, after Redis ran the command: semrun's retries run
//	partition             a master with three replicas, and --min-replicas 2: for 0.5 to 3 TTLs
//	                      the master keeps one replica, the fresher of the other two is
//	                      promoted and the last follows it; half the workers ask the new
//	                      master, half the old; then all follow the new master
//	several-keys          callers of three keys (N=3, 1, 2) in each of their six orders, and of
//	                      each two of them in both orders; one fault at a time: a SIGKILL of a
//	                      holder and of a waiter holding some of its keys, every other waiter
//	                      SIGTERMed, then silence for 0.5 to 2.5 TTLs; a SIGSTOP, past the lease,
//	                      of a waiter holding some of its keys and of a holder with its child's
//	                      group; late, blackholed or dropped replies through the proxy; Redis
//	                      restarted empty, or with its data
//	priorities            callers of one key of two permits asking mixed priorities (100, 50,
//	                      0, -100; and 7, 0, -30, -100 with --priority-age 1s), under
//	                      several-keys' faults, one at a time
//	crowd                 every other waiter of a line of 200 SIGKILLed at once, then the
//	                      holders go: the dead must cost the live seconds in all
//	hold-kill9            the hold workload (below); SIGKILL of the keeper of a hold under way
//	                      (and of each other one, by the toss of a coin), during a step or
//	                      between steps
//	hold-redis            the hold workload; Redis SIGSTOPped for 0.5 to 3 TTLs or restarted
//	                      empty, by the toss of a coin, once a step runs
//	hold-keeper           trials: a keeper SIGKILLed during a step, between two steps, or idle
//	hold-ends             trials: --owner-pid's process SIGKILLed, or --max-runtime (1 to 2s)
//	                      running out, with a step running or not
//	hold-acquire-kill     trials: semrun acquire SIGKILLed waiting in line, at its grant, as its
//	                      keeper starts, or at random on a free key
//	hold-crowd            the crowd, with semrun acquire for waiters (a line of 40)
//	key-revoke            semrun key revoke (no --force) of a holder whose child runs, its id
//	                      read from semrun status --json, or, every other revoke (the first
//	                      included) but one sent while Redis is stopped, of one of its slots
//	                      as status shows them (--slot S); then, three
//	                      times in four, another,
//	                      followed within a third of a TTL by a SIGSTOP of Redis or a blackhole
//	                      of the proxy (0.5 to 1.5 TTLs), or sent while Redis is SIGSTOPped
//	key-pause             semrun key pause, drain or pause --for D of the key, its workers
//	                      waiting in line, for 0.5 to 1.5 TTLs; the line read with semrun
//	                      status --json while paused; then semrun key resume, or the pause's end
//	key-capacity          callers of N=4 under a fault every TTL or so (Redis SIGSTOPped,
//	                      or, through the proxy, nothing forwarded, a quarter of the
//	                      replies dropped or every reply late, for 0.5 to 1.5 TTLs), and
//	                      beside them an operator who, every 0.5 to 1.5 TTLs, keeps a
//	                      capacity below N (semrun key set --permits 2 or 3), names the
//	                      slots (key set --slots, N names: the capacity is N again), or
//	                      forgets both (key unset), another each time, the first lowered
//	min-hold-kill9        once per window (--min-hold 7.5 to 8.5s, children of 0.2 to 1.2s):
//	                      SIGKILL of the semrun whose child just started, then no caller of
//	                      the key at all for 5s (lease, push-back, a second) and a little,
//	                      then callers again; SIGSTOP of the process groups of a holder and
//	                      its child past the lease; Redis restarted with its data (SHUTDOWN
//	                      SAVE, or SIGKILL after a SAVE made while writes were held); a
//	                      quarter of the replies dropped through a proxy for 0.5 to 1.5 TTLs
//	hold-drain            the hold workload; the nemesis's own hold, its keeper SIGKILLed or
//	                      its group SIGSTOPped during a step, between steps or idle (every
//	                      other time, the first included, with the workers of the key stopped
//	                      from before the strike until the resume), then semrun key drain; once drained, a step under
//	                      the handle; 0.5 to 1.5 TTLs later semrun key resume, the keeper
//	                      SIGCONTed, the hold released
//	hold-frozen-keeper    the hold workload; the nemesis's own hold, a step under it whose
//	                      child runs, the keeper's group SIGSTOPped for 1.5 to 2.5 TTLs (past
//	                      its loss point); the step runs on 1 to 2s past the thaw, or, in the
//	                      second act and every third after, ends while the keeper is frozen;
//	                      then release
//
// min-hold-kill9 runs two clusters, each with its redis-server behind a
// proxy: two keys of one permit, and a key of two. On each key one worker
// waits in line for at most a second (--timeout 1s), and one more per
// permit tries once (--no-wait), pausing 0.2 to 0.7s between calls, each
//
//	semrun -k KEY -n N --ttl 2s --min-hold D --no-wait (or --timeout 1s) --kill-after 500ms --connect-timeout 2s -- CHILD RUN HOLD CODE
//
// in a process group of its own. Each key has a lane of strikes: kills
// and silences until one tested the cooling (the callers came back
// before the killed holder's min hold was over), then, in turn, a group
// SIGSTOP (thawed at least 1.5s before the min hold since the grant ends,
// as a frozen child still runs for the checks), a restart with data and
// dropped replies (one lane per cluster), and kills.
//
// several-keys runs, on one redis-server behind a proxy, a worker per order
// of keys: twelve, each calling again and again, pausing up to 100ms,
//
//	semrun -k K1 -n N1 --weight W1 -k K2 -n N2 --weight W2 [-k K3 -n N3 --weight W3] --ttl 2s --timeout 10s --kill-after 500ms --connect-timeout 2s -- CHILD RUN HOLD CODE
//
// in a process group of its own, its child holding 100 to 300ms (within
// -chaos.hold-min and -max). Every weight is 1 but, in half the calls,
// that of the key of three permits, 2. One key's name has an '=' in it:
// the token of a SEMRUN_FENCING_TOKENS line, and the slots of a
// SEMRUN_KEY_SLOTS line, follow its last '='. The faults come in a
// shuffled turn of five kinds, so a short run makes most of them: kill
// (then silence), SIGSTOP, proxy (late, blackholed or dropped replies, by
// a throw), restart empty, restart with data.
//
// The operator's commands reach the redis-server itself, never through the
// proxy. In key-revoke every other worker's child holds 1.5 to 2.5s, and
// the victim is a child with at least 1.57s of its hold left, so that it
// runs past the holder's next renewal and must be stopped.
//
// In the partition nemesis each replica replicates through a proxy of its
// own, which the partition blackholes, and semrun reaches the master
// through one of two endpoints (proxies), one per side, which a failover
// moves to the new master as it would a service address, resetting their
// connections. Neither side can grant during the partition (each master
// has one replica to answer WAIT 2), and the old side's holders are
// presumed lost. With SEMRUN_MIN_REPLICAS=1 instead, both sides grant and
// the overlaps check fails.
//
// # Holds
//
// In the hold workload (hold-kill9, hold-redis) every other worker of a
// key, instead of a run, takes a hold and does what a CI job does:
//
//	semrun acquire -k KEY -n N --ttl 2s --connect-timeout 2s --max-runtime 30s --json
//	semrun --handle H --kill-after 500ms --connect-timeout 2s -- CHILD RUN HOLD CODE   (once or twice)
//	semrun release --connect-timeout 2s H
//
// pausing up to 300ms after the grant, between the steps and before the
// release, or, one time in four, 0.5 to 1.5 TTLs before the release, so that a
// hold nothing renews lapses and its permit is taken first. Each acquire
// gets CHAOS_HOLD, which its keeper inherits: that is how the harness
// finds keepers whose pid nobody printed (a SIGKILLed acquire's), and
// every keeper of a nemesis is SIGKILLed when it ends.
//
// The trial nemeses have no workers: on keys of one permit (two keys, each
// its own lane, trials one after another for -chaos.duration), a trial
// takes a hold, breaks something at a chosen moment, and measures what
// follows with a plain run (a waiter) whose child starts once the permit is
// free. Their redis-server never restarts: no restart fence; and nothing
// stands between semrun and Redis, so their semruns have a
// --connect-timeout of 30s (the crowds' too): a loaded machine never
// excuses a 125 there.
//
//	hold-keeper        The keeper is SIGKILLed; a step under way must go on and pass its
//	                   child's status through (it renews the permit itself), and a step
//	                   after it may start only if the permit has not lapsed (else 112).
//	                   The waiter either waits in line from the kill on, or comes after
//	                   0.5 to 1.5 TTLs of silence: the permit must free within a TTL of the
//	                   last renewal, or half a TTL after a silent key's first call (the
//	                   store's push-back, measured), and release then says 112. One silent
//	                   trial in three releases first: 0 (the push-back kept the hold; its
//	                   span is checked with the holders) or 112, and the permit is free at once.
//	hold-ends          --owner-pid: a step under way is stopped (112, its child TERMed),
//	                   the permit frees within 1s and a renewal (target; the keeper watches
//	                   its owner every second), the keeper exits, and release says 0 and
//	                   names the owner's exit. --max-runtime: a step under way is stopped
//	                   (124), the permit frees within a renewal, the keeper exits, release
//	                   says 124; the hold holds its permit until then (its span is checked).
//	hold-acquire-kill  Whatever a SIGKILLed acquire held frees within the TTL (from the
//	                   kill, or the end of the holder it waited behind); a keeper that had
//	                   taken the hold was never told the handle was printed, and must end
//	                   it and be gone within 3s of the kill.
//
// Every bound of a trial allows 1.5s more (machines are noisy), and the
// machine's allowance (below); the figures show how much was used.
//
// # A loaded machine
//
// A CI runner with noisy neighbours, or two CPU-bound processes beside the
// run, stretches every step the nemeses time. So the harness measures the
// machine's lag as it goes: every 250ms, a semrun on a key and a
// redis-server of its own that no nemesis touches, timed from its launch
// to its child's start (a few tens to a few hundred milliseconds on a
// quiet machine). Each liveness bound below (a heal, a permit freed, a
// child stopped, a keeper gone, a line's order of arrival, the crowd's
// stall) allows twice the longest lag measured around its step; a semrun
// that ended 112 or 125 with no fault near, while the lag was past 500ms
// (a renewal must succeed within 1.3s, a connection within 2s), is
// counted as the machine's ("on a starved machine" in the figures), not
// failed. The safety checks (overlaps, tokens, leaked permits, Redis's
// count of holders, a killed semrun's child gone) allow for nothing, and
// the harness's own waits for what must come (a child started, semruns
// ended) are a minute: they only catch a hang. The log ends with the lags
// measured, second by second.
//
// After a fault heals, the harness waits for the next child to start (that
// wait is the heal time), then about one TTL more. When the time is up, the
// workers stop starting semruns, those under way end by themselves, and
// the checks run.
//
// The crowd has no workers: it checks the line's promise, "a crowd of dead
// waiters costs seconds in all, not a claim each". On one key, five
// semruns hold the N=5 permits, their children waiting for a file; then 200
// semruns join the line one at a time (the harness waits until each is in
// Redis's line before it starts the next), each
//
//	semrun -k KEY -n 5 --ttl 30s --kill-after 500ms --connect-timeout 30s -- CHILD RUN 0 0
//
// Every other one, the 2nd, 4th and so on, is SIGKILLed at once, keeping
// its place (a waiter lease of 10s and more), and the file lets the
// holders go. The stall is the time from then until the last live
// waiter's child ended. The baseline is the same with 100 waiters alone in
// line, on another key: both lines form first, and the baseline is let
// through just before the crowd, so that a busy machine slows both alike.
// With --ttl 30s only the roll call of watch.lua (docs/how-it-works.md,
// "Waiting") takes the dead out of line in time; without it each dead
// waiter at the head costs a 2s claim until the places lapse. Its semruns
// have no restart fence (its redis-server never restarts). Its 310
// semruns start in about 7s on 2 CPUs, and the crowd takes 10 to 15s in
// all, in parallel with the other nemeses. A holder that loses its permit
// before the release lets its line through early, and the stall then
// measures nothing: on a machine stalled long enough to starve a 30s
// lease, the stalls are not compared; otherwise that fails.
//
// # What it checks
//
//   - At no instant do the children of a key hold more than N permits, each
//     holding its --weight: a sweep of the children's starts and ends.
//   - Slots (semantics, section 13): a slot is a permit. At no instant do
//     two holders hold one slot of a key, by the very intervals the permit
//     checks count (holds' spans, a child of several keys once per key, a
//     child woken from a freeze ended at the freeze), as they ran and
//     counted from their grant by token order (next). Every child of a key
//     of at most 1024 permits is told SEMRUN_SLOTS, as many slots as its
//     weight, none twice, each below N, and SEMRUN_SLOT, the first of them;
//     SEMRUN_KEY_SLOTS, a line per key of SEMRUN_FENCING_TOKENS that
//     numbers slots, in its order, the first key's SEMRUN_SLOTS; on
//     a larger key, none of them (a key numbers at most 1024). Each step of
//     a hold is told the same slots (acquire's, when it prints them). In
//     key-revoke, status --json shows the victim's holder holding the slot
//     its child was told. Names told are SEMRUN_SLOT_NAMES, a name per slot
//     of SEMRUN_SLOTS, and SEMRUN_SLOT_NAME, the first, or neither.
//   - No fencing token of a key is handed out twice, and tokens follow the
//     order of the grants: a child was granted before every child with a
//     larger token, so it held its permit at least from the earliest start
//     among them. Counted from there, no more than N children of a key may
//     hold at once. (A token that went down stretches its child back over
//     others and breaks this.) The simpler rule "a child that started after
//     another ended has the larger token" is not checked, only counted
//     ("reordered"): with N > 1 it does not hold. A child starts a moment
//     after its grant, or much later when the grant's reply was lost and
//     semrun asked again, and meanwhile a child granted after it can run
//     and end.
//   - Once the workers stop and every semrun has exited, every permit is
//     free within one TTL: no holder in Redis whose lease has not lapsed
//     on Redis's clock.
//   - Every semrun exited with its child's own status. The exceptions are
//     112 (permit lost) and 125 (Redis unreachable), and only under the
//     nemeses that can cause them (pause, restart, blackhole, dropped
//     replies, partition) and while a fault was under way or up to one TTL
//     after it healed. kill9, proxy-cut and script-flush must cause neither.
//     A machine starved past 500ms of lag excuses them too (above). A
//     step or release under a hold whose record a restart without data
//     took is told the hold is unknown (125) at any time after it.
//   - key-revoke: a holder revoked while Redis answers (the command said
//     so, no fault of Redis within a TTL) has its child stopped within a
//     third of a TTL and 600ms of the revoke (its next renewal; and the
//     machine's allowance) and exits
//     113 naming the reason, or its child ended by itself before then and
//     it exits with the child's status. Under a fault of Redis, 112 is
//     excused as above. 113 is excused only for a run a revoke was aimed
//     at (by slot: also a child told that slot that ran from the revoke
//     until a third of a TTL and 600ms after it, whom it hit had the
//     victim ended first), and an operator's act excuses no 112 or 125. Once a revoked
//     holder's semrun has exited, its permit is free (no live holder with
//     its id on Redis's clock, watched every 50ms) within a TTL and 1.5s,
//     or that long after a fault of Redis that came first (a silent key's
//     leases are pushed back).
//   - key-pause: no child of the key granted while paused (its token,
//     Redis's clock in µs, between the pause's acknowledgement and its
//     end); children granted before run on. When a drain says nobody
//     holds the key, no child of it runs. After the pause, the first
//     grants go to the line read while paused, in its order (the order of
//     their tokens), and that line is the order of arrival (no later
//     place launched more than 1s, and the machine's allowance, before an
//     earlier one). The line is then served within 2 TTLs (the heal).
//   - key-capacity: each act of the operator exits 0 while Redis answers
//     (else the key's setting is unknown until the next act). A child is
//     judged by the setting kept when it was granted, if its grant lies
//     wholly inside a window between two acts: its token (Redis's clock at
//     the grant) after the end of one act, and its token and its start
//     before the start of the next (what a child is told, it is told
//     between its grant and its start, however late a lost reply makes
//     the start). Granted while a capacity M below N was kept, it holds
//     only slots below M (whoever held a slot past M when it was lowered
//     runs on, judged as every run), and the children granted inside that
//     window hold at most M permits at once among themselves (each was
//     granted while fewer than M were held, them included). Granted while
//     the slots were named, it was told the names of exactly its slots
//     (name i for slot i, the names of that act); otherwise, none. With
//     the stored capacity ignored, or each slot given the next one's name,
//     these fail.
//   - min-hold-kill9: no more than N grants of a key within its min hold
//     (and of a slot, one: a cooling permit keeps its slot): the Nth grant
//     after another, by their tokens (Redis's clock at the grant), comes
//     the min hold later at least, and, by the children's
//     starts, the Nth child to start after another starts no sooner than
//     the min hold less the machine's allowance (or, if more, how late the
//     first started after its token, as when a lost reply was asked
//     again) and 100ms. A restart empty between excuses the pair (data
//     lost is documented); a restart with data excuses nothing. And at
//     least one kill was followed by a silence of 5s that ended before the
//     killed holder's min hold: a run that tested nothing fails.
//   - hold-drain: drain exits 0 (or a starved machine excuses it); from
//     its exit until the resume, nothing holds a permit of the key, by the
//     children's lines and the holds' spans; the step under the handle
//     tried meanwhile exits 112 without starting its child; and the
//     hold's release says 112 (lost), never 0.
//   - hold-frozen-keeper: the step's status is its child's, as the child
//     said it in its last line (it renews the hold itself while the keeper
//     is frozen); release says 0, or, when the step ended while the keeper
//     was frozen, 112 naming the loss; and no overlap of the holders (a
//     release that said 0 for a hold it had lost would show as one). A
//     starved machine excuses a 112 or 125.
//   - several-keys: a child of several keys holds a permit of each, with
//     the token SEMRUN_FENCING_TOKENS gives for it: the checks above
//     (overlaps, with each key's own N; tokens never reused and in the
//     order of the grants; the restart fence) run per key on those, and
//     Redis's count of each key's holders, sampled every 50ms, never
//     exceeds its N. A child frozen whole with its semrun, and stopped as
//     it woke (within --kill-after, 100ms and the machine's allowance of
//     the thaw), holds until the freeze: it runs a moment on waking beside
//     whoever its permit lapsed to, which no semrun can help (a paused VM,
//     docs/how-it-works.md), and its token fences it; one that ran on
//     longer holds throughout. One frozen before it said it started (its
//     group stopped with its semrun's) says so only on waking, and, stopped
//     then, is left out. Each child's SEMRUN_FENCING_TOKENS names its
//     run's keys in the order given, the first being SEMRUN_HELD_KEY with
//     SEMRUN_FENCING_TOKEN; a 112 names a key of the run in its "permit
//     lost" line, and a 75 in its --timeout line. At each silence, and
//     at the end (when the waiters are SIGTERMed too, so that the run
//     ends within a hold, not a --timeout), once every semrun but the ones
//     killed has exited (those SIGTERMed while they waited exit 143),
//     Redis holds nothing for any of them, unless a fault of Redis or a
//     starved machine came while it ran. Liveness: from the
//     first child until the workers stop, no span longer than 2 TTLs and
//     the machine's allowance in which no child of any key ran, away from
//     faults (2 TTLs after each, as for a heal): callers wait all the time
//     and take their keys in one order, so one of them can always go on;
//     every order of keys ran its command, and more runs ran than gave up
//     waiting (75). With the keys taken in each caller's own order
//     instead, callers deadlock until their --timeout, and all three fail.
//     After a restart with its data (a new replication id), each key's
//     fence starts at the first call that may grant it, and a caller asks
//     its next key only once it holds the ones before, so the heal may
//     take a fence (a TTL and a second) more per key past the first.
//   - priorities (semantics, section 14): its eight workers, one per
//     priority, call as several-keys' do (--timeout 10s, a group of their
//     own, a fault at a time), and its checks are several-keys' but per
//     caller. Nobody is lost from the line: a semrun neither killed nor
//     SIGTERMed whose child never started exited within its --timeout,
//     2 TTLs, the machine's allowance and as long as the faults it waited
//     through. The caller of priority 100 with no age, ahead of every
//     other in line, away from faults, starts its child within 2 TTLs and
//     the machine's allowance and never gives up. No caller of a lower
//     priority is granted while one of a higher priority waits: the line
//     is read with semrun status --json every 200ms, and, between callers
//     with no age (a higher priority then comes first whatever the
//     arrivals), away from faults and on a machine not starved, a caller
//     seen waiting must be granted (its token, Redis's clock when a permit
//     is handed to the head of the line) before any caller of a lower
//     priority granted after the read; one that gave up (75) with its
//     --timeout running out after such a grant was passed over. Status
//     shows each waiter's priority: the one it asked, with no age; at
//     least that, with one. And no span of 2 TTLs with no child running,
//     away from faults. Every other fault (the first included) is
//     followed by 4 to 6 TTLs of peace, so that these checks have
//     stretches to judge.
//   - After each fault heals, the next child starts within 2 TTLs and the
//     machine's allowance. The target is TTL + TTL/3, reported as a figure
//     and not failed on, since machines are noisy.
//   - A SIGKILLed semrun's child is gone within 1s, in every trial: a
//     pidfd of the child, opened before the kill, is looked at 1s after it,
//     however late the harness gets there. The target is 100ms, reported
//     as p50, p99 and max of when the harness saw the child's connection
//     end, and not failed on, since machines are noisy.
//   - Crowd: the live waiters behind the dead ones run their children at
//     most 10s later in all than the baseline (for a line shorter than 200,
//     10s scaled to its length, at least 3s; as long as the baseline took,
//     when longer; and the machine's allowance), every live semrun exits 0,
//     and no child of a killed waiter ever runs. The checks above run on
//     its children too. Hold crowd: the same, at least 5s (the roll call
//     costs about 2s however short the line); every live acquire and its
//     release exit 0, no killed acquire printed a hold or left a keeper,
//     and every keeper exits once it sees its release.
//   - Restarts: a child granted before Redis restarted empty (its token,
//     microseconds of Redis's clock, below the restart's start) has ended
//     before any child granted after it (a token above the restart's end)
//     starts. That is the restart fence's promise; with N > 1 the count of
//     overlaps alone would not see a lost holder and a newcomer on one
//     permit.
//   - Holds count as holders. A hold's steps share its token, and its
//     permit: the checks of overlaps and tokens see one holder from its
//     first step's start to its last one's end, or, when its release said
//     0 (it gave the permit back), over its whole span, from acquire's exit
//     to the release's start, since the permit was its throughout. A
//     release that says 0 for a hold it had in fact lost breaks these.
//   - Each step's child has its hold's token. A hold's semruns end as they
//     may: acquire 0; a step its child's status (112 or 125 under a fault
//     of Redis, as a run); a step that did not start 112 only once its
//     hold may have been lost (its keeper SIGKILLed, or a fault of Redis
//     near); release 0, or 112 only where the hold may have been lost, and
//     never 0 for a hold held while Redis restarted empty.
//   - Redis never counts more holders of a key than N: the hold nemeses
//     sample it every 50ms, in one script with the clock (holds hold permits
//     with no child running).
//   - Every keeper has exited once its hold was released (a third of the
//     TTL later, at its next renewal; the harness allows a TTL, and the
//     machine's allowance).
//
// The figures are logged per nemesis: semruns, grants, faults, overlaps,
// token faults, the holders told their slots (of more than one), slots
// held twice and holders told wrong slots, reordered starts, leaked permits, when the permits were all
// free, the longest heal time, how many semruns ended 112, 113, 124 and
// 125, and
// the kill trials' latencies (p50, p99, max); for the crowd, the live and
// dead waiters, the stall, the baseline and the live semruns' statuses;
// for holds, the holds taken, the statuses of acquire, steps and release,
// and, for the trials, their counts by kind and each measure's median and
// maximum (the permit free after what, the push-back, the keepers' exits),
// the table showing the longest wait for a hold's permit; for
// min-hold-kill9, its strikes by kind and the silences, and the grants
// that broke a min hold (in the overlaps column); for hold-drain, the
// drains by kind, their statuses and how long they took, and what held
// while drained (in the overlaps column); for hold-frozen-keeper, the
// frozen keepers and how their releases ended; for several-keys, its
// faults by kind, each key's holders, the runs that ran and gave up by
// order of keys, the silences at which Redis's holders were read and what
// was not given back, and the stalls; for priorities, the runs that ran and
// gave up by priority, the waits of priority 100, the pairs judged for
// order and those out of order, and the lines read; for key-revoke,
// the revokes by kind (and by slot, and the slot's other holders that
// exited 113), how the revoked ended (113, 112, their child first),
// how soon their child stopped and their permit was free; for key-pause, the
// pauses by kind, grants while paused, lines read and served out of order;
// for key-capacity, the acts by kind (and how many lowered the capacity
// below a slot held then, and failed), the children judged per kind of
// window, those holding a slot past a lowered capacity or told wrong
// names (in the slot faults column too), and the overlaps of a lowered
// capacity (in the overlaps column too).
package chaos
