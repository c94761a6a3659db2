// Package chaos is semrun's chaos harness: a test that runs many real
// semrun processes against real redis-server processes on loopback, breaks
// things while they run, and checks afterwards that semrun kept its
// promises. All its code is in its tests.
//
// # Running it
//
// The short run is part of the README's test command, so CI runs it. Every
// nemesis gets about 15 seconds, and they all run at once, in about half a
// minute:
//
//	go test -count=1 ./chaos
//	go test -count=1 -v ./chaos                             # with the figures
//	go test -count=1 -v ./chaos -run TestChaos/redis-pause  # one nemesis
//
// The long run gives each nemesis at least ten minutes (the crowd lines up
// once, as in the short run), makes 1000 SIGKILL trials, and goes on until
// the nemeses have made 100,000 grants in all (about 20 minutes on 2
// CPUs). Build it without -race, so that the children start fast:
//
//	go test ./chaos -run TestChaos -timeout 0 -v -args -chaos.long
//
// -chaos.long sets -chaos.duration=10m -chaos.kill-trials=1000
// -chaos.hold-min=20ms -chaos.hold-max=200ms -chaos.grants=100000; a flag
// given as well wins. The short run holds each child 100ms to 1s instead,
// because under -race a child costs about 17ms of CPU to start, and CI
// runs the other packages' tests at the same time. The nemeses run at once
// unless -parallel is given: with -parallel 1 they run one after another,
// each with the whole machine. -chaos.keys=K gives each nemesis K keys
// (kill9 4K); -chaos.crowd=L makes the crowd's line L waiters long (200). -chaos.seed=S repeats a run's random choices (the seed is
// logged), though not the processes' timing. Like the other tests, it
// skips when redis-server is not installed, and fails instead when CI=true.
//
// # What it does
//
// Each nemesis is a subtest with its own redis-server, its own keys and, for
// the network faults, its own TCP proxy between semrun and Redis. Six
// workers per key (N=2; kill9: four keys of N=3, four workers each) run,
// again and again,
//
//	semrun -k KEY -n N --ttl 2s --kill-after 500ms --connect-timeout 2s -- CHILD RUN HOLD CODE
//
// where CHILD is this test binary started again in child mode. The child
// notes its start on CLOCK_MONOTONIC first, tells the harness over a unix
// socket its start, its fencing token and its key, holds for HOLD, notes
// its end, tells that too, and exits with CODE. On SIGTERM it tells its end
// and exits 143 at once. A child killed by SIGKILL says nothing: its end is
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
//	crowd                 every other waiter of a line of 200 SIGKILLed at once, then the
//	                      holders go: the dead must cost the live seconds in all
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
// After a fault heals, the harness waits for the next child to start (that
// wait is the heal time), then about one TTL more. When the time is up, the
// workers stop starting semruns, those under way end by themselves, and
// the checks run.
//
// The crowd has no workers: it checks the line's promise, "a crowd of dead
// waiters costs seconds in all, not a claim each". On one key, five
// semruns hold the N=5 seats, their children waiting for a file; then 200
// semruns join the line one at a time (the harness waits until each is in
// Redis's line before it starts the next), each
//
//	semrun -k KEY -n 5 --ttl 30s --kill-after 500ms --connect-timeout 2s -- CHILD RUN 0 0
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
// have no restart fence (its redis-server never restarts), and its
// children GORACE=atexit_sleep_ms=0, since a child built with -race
// otherwise sleeps 1s on exit, holding its seat. Its 310 semruns start in
// about 7s on 2 CPUs, and the crowd takes 10 to 15s in all, in parallel
// with the other nemeses.
//
// # What it checks
//
//   - At no instant do more than N children of a key run: a sweep of the
//     children's starts and ends.
//   - No fencing token of a key is handed out twice, and tokens follow the
//     order of the grants: a child was granted before every child with a
//     larger token, so it held its seat at least from the earliest start
//     among them. Counted from there, no more than N children of a key may
//     hold at once. (A token that went down stretches its child back over
//     others and breaks this.) The simpler rule "a child that started after
//     another ended has the larger token" is not checked, only counted
//     ("reordered"): with N > 1 it does not hold. A child starts a moment
//     after its grant, or much later when the grant's reply was lost and
//     semrun asked again, and meanwhile a child granted after it can run
//     and end.
//   - Once the workers stop and every semrun has exited, every seat is
//     free within one TTL: no holder in Redis whose lease has not lapsed
//     on Redis's clock.
//   - Every semrun exited with its child's own status. The exceptions are
//     112 (permit lost) and 125 (Redis unreachable), and only under the
//     nemeses that can cause them (pause, restart, blackhole, dropped
//     replies, partition) and while a fault was under way or up to one TTL
//     after it healed. kill9, proxy-cut and script-flush must cause neither.
//   - After each fault heals, the next child starts within 2 TTLs. The
//     target is TTL + TTL/3, reported as a figure and not failed on, since
//     machines are noisy.
//   - A SIGKILLed semrun's child is gone within 1s, in every trial. The
//     target is 100ms, reported as p50, p99 and max, and not failed on,
//     since machines are noisy.
//   - Crowd: the live waiters behind the dead ones run their children at
//     most 10s later in all than the baseline (for a line shorter than 200,
//     10s scaled to its length, at least 3s), every live semrun exits 0,
//     and no child of a killed waiter ever runs. The checks above run on
//     its children too.
//
// The figures are logged per nemesis: semruns, grants, faults, overlaps,
// token faults, reordered starts, leaked seats, when the seats were all
// free, the longest heal time, how many semruns ended 112 and 125, and the
// kill trials' latencies (p50, p99, max); for the crowd, the live and dead
// waiters, the stall, the baseline and the live semruns' statuses.
package chaos
