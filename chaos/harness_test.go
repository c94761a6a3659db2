//go:build linux

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/redistest"
)

// What every semrun of the harness is given.
const (
	ttl       = 2 * time.Second
	killAfter = 500 * time.Millisecond
	// connectTimeout is the --connect-timeout of the nemeses that fault
	// Redis: their semruns give up (125) on a fault that outlasts it.
	connectTimeout = 2 * time.Second
	// calmConnect is that of the nemeses that leave Redis alone (the
	// trials, the crowds, the prober): nothing excuses a 125 there, however
	// slowly a loaded machine runs.
	calmConnect = 30 * time.Second
)

// kid is one child as the harness saw it over its connection. Times are
// mono().
type kid struct {
	run       int
	pid, ppid int
	key       string
	token     int64
	start     int64
	end       int64  // from its E line, or when its connection ended without one
	how       string // done, term, or killed: it never said E
	code      int    // the exit status it said it exits with, -1 when it never said E
	gone      int64  // when its connection ended: the process is gone
	goneCh    chan struct{}
	hold      int  // the hold it ran a step of, 0 for none (the checks set it)
	announced bool // it said S
	// tokens are every key's token, as SEMRUN_FENCING_TOKENS gave them,
	// in its order; told: it said T.
	tokens []keyToken
	told   bool
	// slots are its first key's slots as SEMRUN_SLOTS gave them, in its
	// order, and slot SEMRUN_SLOT (slotSet: it was set); keySlots are
	// every key's, as SEMRUN_KEY_SLOTS gave them, in its order (set: it
	// was set). slotted: it said L, semrun gave some of them.
	slots       []int
	slot        int
	slotSet     bool
	keySlots    []keySlots
	keySlotsSet bool
	slotted     bool
	// slotName and slotNames are its first key's slots' names, as
	// SEMRUN_SLOT_NAME and SEMRUN_SLOT_NAMES (split at its commas) gave
	// them (set: they were set): an operator named the key's slots.
	slotName     string
	slotNameSet  bool
	slotNames    []string
	slotNamesSet bool
	// weight is how many permits of key it asked for (--weight; 0: one).
	// The checks set it.
	weight int
}

// keySlots is one line of SEMRUN_KEY_SLOTS.
type keySlots struct {
	key   string
	slots []int
}

// slotList reads SEMRUN_SLOTS: slot numbers, comma-separated, each as
// strconv.Itoa writes it. Their order, their count and their bounds are
// the checks' (slotFaults).
func slotList(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("no slot")
	}
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p != strconv.Itoa(n) {
			return nil, fmt.Errorf("%q: want slot numbers, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// keySlotList reads SEMRUN_KEY_SLOTS: KEY=SLOTS a line, the slots after
// the last '=' (a key may have one), as fencingTokens reads tokens; none
// for a key that numbers none.
func keySlotList(s string) ([]keySlots, error) {
	var out []keySlots
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(line, "\n")
		i := strings.LastIndexByte(line, '=')
		if i <= 0 {
			return nil, fmt.Errorf("line %q: want KEY=SLOTS", line)
		}
		var slots []int
		var err error
		if line[i+1:] != "" {
			slots, err = slotList(line[i+1:])
		}
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out = append(out, keySlots{key: line[:i], slots: slots})
	}
	if len(out) == 0 {
		return nil, errors.New("no KEY=SLOTS line")
	}
	return out, nil
}

// readSlots reads the child's L line into k: "L slot slots keyslots
// name names", each quoted, or - when semrun did not set it.
func readSlots(k *kid, line string) error {
	rest := strings.TrimSuffix(strings.TrimPrefix(line, "L"), "\n")
	var vals [5]string
	var set [5]bool
	for i := range vals {
		if !strings.HasPrefix(rest, " ") {
			return errors.New("want five fields")
		}
		rest = rest[1:]
		if after, ok := strings.CutPrefix(rest, "-"); ok {
			rest = after
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return fmt.Errorf("field %d: %w", i+1, err)
		}
		rest = rest[len(q):]
		vals[i], _ = strconv.Unquote(q)
		set[i] = true
	}
	if rest != "" {
		return fmt.Errorf("%q after the five fields", rest)
	}
	k.slotted = true
	var errs [3]error
	if k.slotSet = set[0]; set[0] {
		var one []int
		if one, errs[0] = slotList(vals[0]); errs[0] == nil && len(one) != 1 {
			errs[0] = fmt.Errorf("SEMRUN_SLOT %q: want one slot", vals[0])
		} else if errs[0] == nil {
			k.slot = one[0]
		}
	}
	if set[1] {
		k.slots, errs[1] = slotList(vals[1])
	}
	if k.keySlotsSet = set[2]; set[2] {
		k.keySlots, errs[2] = keySlotList(vals[2])
	}
	// Names are data: whether they are the slots', slotsTold and
	// capacityFaults judge.
	k.slotName, k.slotNameSet = vals[3], set[3]
	if k.slotNamesSet = set[4]; set[4] {
		k.slotNames = strings.Split(vals[4], ",")
	}
	return errors.Join(errs[:]...)
}

// keyToken is one line of SEMRUN_FENCING_TOKENS.
type keyToken struct {
	key   string
	token int64
}

// fencingTokens reads SEMRUN_FENCING_TOKENS: KEY=TOKEN a line, the token
// after the last '=' (a key may have one).
func fencingTokens(s string) ([]keyToken, error) {
	var out []keyToken
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(line, "\n")
		i := strings.LastIndexByte(line, '=')
		if i <= 0 {
			return nil, fmt.Errorf("line %q: want KEY=TOKEN", line)
		}
		token, err := strconv.ParseInt(line[i+1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		out = append(out, keyToken{key: line[:i], token: token})
	}
	if len(out) == 0 {
		return nil, errors.New("no KEY=TOKEN line")
	}
	return out, nil
}

// grants counts the children started, of every nemesis.
var grants atomic.Int64

// recorder listens on a unix socket for the children's lines.
type recorder struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	kids map[int]*kid // by run
	open map[net.Conn]struct{}
	// last is the latest start of a child holding each key.
	last map[string]int64
	bad  []string // lines that did not parse
}

func newRecorder(t *testing.T, path string) *recorder {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, kids: map[int]*kid{}, open: map[net.Conn]struct{}{}, last: map[string]int64{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *recorder) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		r.mu.Lock()
		r.open[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Add(1)
		go r.read(c)
	}
}

// read follows one child until its connection ends: that is when the
// process is gone (or closed it on its way out).
func (r *recorder) read(c net.Conn) {
	defer r.wg.Done()
	var k *kid
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			now := mono()
			r.mu.Lock()
			delete(r.open, c)
			if k != nil {
				k.gone = now
				if k.end == 0 {
					k.end, k.how = now, "killed"
				}
				close(k.goneCh)
			}
			r.mu.Unlock()
			_ = c.Close()
			return
		}
		f := strings.Fields(line)
		r.mu.Lock()
		switch {
		case len(f) == 7 && f[0] == "S" && k == nil:
			k = &kid{goneCh: make(chan struct{}), announced: true, key: f[5], code: -1}
			var errs [5]error
			k.pid, errs[0] = strconv.Atoi(f[1])
			k.ppid, errs[1] = strconv.Atoi(f[2])
			k.start, errs[2] = strconv.ParseInt(f[3], 10, 64)
			k.token, errs[3] = strconv.ParseInt(f[4], 10, 64)
			k.run, errs[4] = strconv.Atoi(f[6])
			if err := errors.Join(errs[:]...); err != nil {
				r.bad = append(r.bad, fmt.Sprintf("%q: %v", line, err))
			}
			r.kids[k.run] = k
			r.last[k.key] = max(r.last[k.key], k.start)
			grants.Add(1)
		case len(f) == 4 && f[0] == "E" && k != nil && k.end == 0:
			end, err1 := strconv.ParseInt(f[1], 10, 64)
			code, err2 := strconv.Atoi(f[3])
			if err := errors.Join(err1, err2); err != nil {
				r.bad = append(r.bad, fmt.Sprintf("%q: %v", line, err))
				end, code = mono(), -1
			}
			k.end, k.how, k.code = end, f[2], code
		case len(f) >= 2 && f[0] == "L" && k != nil && !k.slotted:
			if err := readSlots(k, line); err != nil {
				r.bad = append(r.bad, fmt.Sprintf("%q: %v", line, err))
			}
		case len(f) >= 2 && f[0] == "T" && k != nil && !k.told:
			k.told = true
			quoted := strings.TrimSuffix(strings.TrimPrefix(line, "T "), "\n")
			s, err := strconv.Unquote(quoted)
			if err == nil {
				k.tokens, err = fencingTokens(s)
			}
			if err != nil {
				r.bad = append(r.bad, fmt.Sprintf("%q: %v", line, err))
			}
			for _, kt := range k.tokens {
				r.last[kt.key] = max(r.last[kt.key], k.start)
			}
		default:
			r.bad = append(r.bad, fmt.Sprintf("%q", line))
		}
		r.mu.Unlock()
	}
}

// lastStart is the latest start of a child of key, 0 before any.
func (r *recorder) lastStart(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[key]
}

// get returns the child of run, once it said S.
func (r *recorder) get(run int) (kid, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.kids[run]
	if !ok {
		return kid{}, false
	}
	return *k, true
}

// running returns the children that said S and have neither ended nor gone.
func (r *recorder) running() []*kid {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*kid
	for _, k := range r.kids {
		if k.end == 0 {
			out = append(out, k)
		}
	}
	return out
}

// snapshot copies the children, for the checks.
func (r *recorder) snapshot() ([]kid, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]kid, 0, len(r.kids))
	for _, k := range r.kids {
		out = append(out, *k)
	}
	return out, append([]string(nil), r.bad...)
}

// quiet waits until no child's connection is open, for at most d, and
// returns how many still are.
func (r *recorder) quiet(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		r.mu.Lock()
		n := len(r.open)
		r.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *recorder) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	for c := range r.open {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// run is one semrun the workers started.
type run struct {
	id       int
	key      string
	hold     int // ms
	code     int // the child's exit status
	proc     *os.Process
	launched int64
	exited   int64
	status   int            // semrun's exit status, -1 when a signal ended it
	signal   syscall.Signal // the signal that ended it
	killed   bool           // by the kill9 nemesis
	revoked  bool           // an operator's revoke was aimed at it (key-revoke)
	// mayBeBusy: it tried once, or waited a while (--no-wait, --timeout):
	// the busy status (75) with no child is an answer.
	mayBeBusy bool
	// group: its semrun leads a process group of its own, which a nemesis
	// may stop whole (min-hold-kill9).
	group  bool
	stdout string // what acquire printed
	stderr string
	// of is the hold this semrun acquires, runs a step of or releases,
	// as its role says; nil for a run of its own.
	of   *hold
	role string
	// keys: the keys of a run of several (-k a -k b), in the order it
	// gave them; key is the first. Nil for one key.
	keys []string
	// weights are its --weight, per key of keys (or of key alone), in
	// their order; nil: one permit of each.
	weights []int
	// interrupted: the harness SIGTERMed it while it waited (several-keys),
	// at interruptedAt; timeout is its --timeout (0: none).
	interrupted   bool
	interruptedAt int64
	timeout       time.Duration
}

// cluster is one nemesis's world: a redis-server, maybe a proxy, the
// recorder, and workers running semrun on its keys.
type cluster struct {
	t       *testing.T
	srv     *redistest.Server
	proxy   *redistest.Proxy
	keys    []string
	permits int
	rec     *recorder
	bin     string        // semrun
	child   string        // what semrun runs (chaos/child)
	connect time.Duration // the semruns' --connect-timeout
	env     []string
	seed    uint64
	t0      int64
	dir     string // the cluster's own directory: the children's socket, the keepers' tags
	// withHolds: every other worker of a key takes holds (holdOnce)
	// instead of running its command on its own.
	withHolds bool
	longHolds bool // see nemesis
	weighted  bool // see nemesis
	// wallOff turns mono() into the wall clock, in ns: Redis's clock,
	// which fencing tokens and leases count in.
	wallOff int64

	mu     sync.Mutex
	runs   map[int]*run
	nextID int
	faults []fault
	direct *redis.Client // to the redis-server itself, made on first use
	repl   *replicaSet   // the partition nemesis's replicas and endpoints
	holds  []*hold
	// The operator's acts of key-revoke and key-pause (operator_test.go),
	// and the watches of revoked holders' permits.
	revokes []*revocation
	pauses  []*keyPause
	// The acts of key-capacity's operator, in the order they began.
	capacities []*capacityChange
	// The acts of hold-drain and hold-frozen-keeper (holdops_test.go).
	drains   []*drainAct
	thaws    []*thaw
	watching sync.WaitGroup
	// capacity is each key's N when the keys differ (several-keys); nil:
	// every key has permits.
	capacity map[string]int
	// woke are the runs frozen whole, semrun and child, by id: from when
	// until when (several-keys).
	woke map[int]frozen

	// silent keys get no new turn of a worker; turns counts those under
	// way, by key (enter, leave, silence).
	silent map[string]bool
	turns  map[string]int

	stop    context.CancelFunc
	workers sync.WaitGroup
}

// fault is one fault injected: what, from when until it healed (mono()).
type fault struct {
	what        string
	start, heal int64
	// restart: Redis lost every key. wallStart and wallHeal are start and
	// heal on the wall clock in microseconds, as fencing tokens count.
	restart             bool
	wallStart, wallHeal int64
	// operator: an operator's act (semrun key), which excuses no 112 or
	// 125, whatever the nemesis.
	operator bool
}

func newCluster(t *testing.T, n nemesis, keys, permits int, seed uint64) *cluster {
	t.Helper()
	bin, child := binaries(t)
	srv := redistest.New(t)
	// A short directory: a unix socket's path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	c := &cluster{
		t: t, srv: srv, permits: permits, seed: seed, dir: dir, withHolds: n.holds, longHolds: n.longHolds, weighted: n.weighted,
		rec: newRecorder(t, filepath.Join(dir, "kids")), bin: bin, child: child, connect: connectTimeout, runs: map[int]*run{},
		silent: map[string]bool{}, turns: map[string]int{},
	}
	url := srv.URL() // what semrun is given
	if n.replicated {
		c.repl = startReplicas(t, srv, seed)
	}
	if n.proxied {
		p, err := redistest.StartProxy(srv.Addr, seed)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		c.proxy = p
		url = c.proxy.URL()
	}
	for i := range keys {
		c.keys = append(c.keys, fmt.Sprintf("%s-%d", n.name, i))
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SEMRUN_") && !strings.HasPrefix(kv, "CHAOS_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			c.env = append(c.env, kv)
		}
	}
	if n.replicated {
		// A majority of the three replicas (see the partition nemesis).
		c.env = append(c.env, "SEMRUN_MIN_REPLICAS=2")
	}
	c.env = append(c.env,
		"SEMRUN_REDIS_URL="+url,
		"XDG_CONFIG_HOME="+dir, // no user's config file
		socketEnv+"="+filepath.Join(dir, "kids"))
	// Keepers outlive the semruns that started them: whatever holds the
	// test took, their keepers end with it.
	t.Cleanup(c.stopKeepers)
	c.t0 = mono()
	c.wallOff = time.Now().UnixNano() - mono()
	return c
}

// weightOf is how many permits of key run id asked for: one unless it
// gave --weight.
func (c *cluster) weightOf(id int, key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.runs[id]
	if r == nil || r.weights == nil {
		return 1
	}
	keys := r.keys
	if keys == nil {
		keys = []string{r.key}
	}
	if i := slices.Index(keys, key); i >= 0 && i < len(r.weights) {
		return r.weights[i]
	}
	return 1
}

// permitsOf is key's N.
func (c *cluster) permitsOf(key string) int {
	if n, ok := c.capacity[key]; ok {
		return n
	}
	return c.permits
}

// rel shows a mono() time as seconds since the cluster started.
func (c *cluster) rel(ns int64) string {
	return fmt.Sprintf("%.3fs", float64(ns-c.t0)/1e9)
}

// start starts perKey workers on each key. t's end stops them and kills
// any semrun still running.
func (c *cluster) start(perKey int) {
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	for i, key := range c.keys {
		for j := range perKey {
			rng := rand.New(rand.NewPCG(c.seed, uint64(i*1000+j)))
			c.workers.Add(1)
			go func() {
				defer c.workers.Done()
				for ctx.Err() == nil {
					if !c.enter(key) {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if c.withHolds && j%2 == 1 {
						c.holdOnce(key, rng)
					} else {
						weight := 1
						if c.weighted && j == 0 {
							weight = 2
						}
						c.runOnce(key, j%2, weight, rng)
					}
					c.leave(key)
				}
			}()
		}
	}
	c.t.Cleanup(func() {
		stop()
		c.killUntilDone()
	})
}

// enter counts a worker's turn on key under way, unless the key is left
// silent (silence).
func (c *cluster) enter(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.silent[key] {
		return false
	}
	c.turns[key]++
	return true
}

// leave ends a worker's turn on key.
func (c *cluster) leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.turns[key]--
}

// silence stops the workers of key from starting turns (or lets them
// again, when on is false), and, when on, waits until none is under way,
// for at most d; it returns when the last one ended, 0 when some still
// ran at d.
func (c *cluster) silence(key string, on bool, d time.Duration) int64 {
	c.mu.Lock()
	c.silent[key] = on
	c.mu.Unlock()
	if !on {
		return 0
	}
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		n := c.turns[key]
		c.mu.Unlock()
		if n == 0 {
			return mono()
		}
		if time.Now().After(deadline) {
			return 0
		}
	}
}

// killUntilDone kills every semrun until the workers have all returned: a
// worker may start one more semrun as it is told to stop. It returns how
// many it killed.
func (c *cluster) killUntilDone() int {
	done := make(chan struct{})
	go func() { c.workers.Wait(); close(done) }()
	killed := 0
	for {
		killed += c.killAll()
		select {
		case <-done:
			return killed
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runOnce runs one semrun, of the given side of a partition, for weight
// permits, and records how it ended.
func (c *cluster) runOnce(key string, side, weight int, rng *rand.Rand) {
	var env []string
	if c.repl != nil {
		// The side's endpoint; exec.Cmd uses the last value of a variable.
		env = append(env, "SEMRUN_REDIS_URL="+c.repl.endpoints[side].URL())
	}
	hold := childHold(rng)
	if c.longHolds && side == 0 {
		hold = int((ttl*3/4 + upTo(rng, ttl/2)).Milliseconds())
	}
	r := c.newRun(key, hold, rng.IntN(101))
	if weight > 1 {
		c.mu.Lock()
		r.weights = []int{weight}
		c.mu.Unlock()
	}
	wait, err := c.launch(r, ttl, env...)
	if err != nil {
		c.t.Errorf("start semrun: %v", err)
		time.Sleep(100 * time.Millisecond)
		return
	}
	wait()
}

// childHold is how long a worker's child holds: -chaos.hold-min to
// -chaos.hold-max, in ms.
func childHold(rng *rand.Rand) int {
	lo, hi := holdMin.Milliseconds(), max(holdMax.Milliseconds(), holdMin.Milliseconds())
	return int(lo + rng.Int64N(hi-lo+1))
}

// newRun records a semrun to be started on key, whose child holds for
// hold ms and exits with code.
func (c *cluster) newRun(key string, hold, code int) *run {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	r := &run{id: c.nextID, key: key, hold: hold, code: code}
	c.runs[r.id] = r
	return r
}

// launch starts r's semrun, with a lease of lease and env added to the
// cluster's. wait waits for it to end and records how.
func (c *cluster) launch(r *run, lease time.Duration, env ...string) (wait func(), err error) {
	args := []string{"-k", r.key, "-n", strconv.Itoa(c.permits)}
	c.mu.Lock()
	if r.weights != nil {
		args = append(args, "--weight", strconv.Itoa(r.weights[0]))
	}
	c.mu.Unlock()
	args = append(append(args, "--ttl", lease.String(), "--kill-after", killAfter.String(), "--connect-timeout", c.connect.String(),
		"--"), c.childArgs(r)...)
	return c.spawn(r, args, env...)
}

// childArgs is the command of r's semrun: the child, told r's id, hold
// and exit status.
func (c *cluster) childArgs(r *run) []string {
	return []string{c.child, strconv.Itoa(r.id), strconv.Itoa(r.hold), strconv.Itoa(r.code)}
}

// spawn starts semrun with args for r, with env added to the cluster's.
// wait waits for it to end and records how.
func (c *cluster) spawn(r *run, args []string, env ...string) (wait func(), err error) {
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(slices.Clone(c.env), env...)
	var stdout, stderr tail
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Should the harness die, its semruns die with it, and their children
	// with them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: r.group}
	launched := mono()
	err = cmd.Start()
	c.mu.Lock()
	r.launched, r.proc = launched, cmd.Process
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return func() {
		_ = cmd.Wait()
		exited := mono()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		c.mu.Lock()
		defer c.mu.Unlock()
		r.exited, r.stdout, r.stderr = exited, stdout.String(), stderr.String()
		r.status = ws.ExitStatus()
		if ws.Signaled() {
			r.signal = ws.Signal()
		}
	}, nil
}

// runningRun returns run id if its semrun is under way and not killed.
func (c *cluster) runningRun(id int) *run {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.runs[id]
	if r == nil || r.proc == nil || r.exited != 0 || r.killed {
		return nil
	}
	return r
}

// killAll kills every semrun still running.
func (c *cluster) killAll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.runs {
		if r.proc != nil && r.exited == 0 {
			if r.proc.Kill() == nil {
				n++
			}
		}
	}
	return n
}

// drain stops the workers from starting semruns and waits for those under
// way to end by themselves, for at most d; then it kills the rest. It
// returns when the last one ended, and how many it had to kill.
func (c *cluster) drain(d time.Duration) (int64, int) {
	c.stop()
	done := make(chan struct{})
	go func() { c.workers.Wait(); close(done) }()
	killed := 0
	select {
	case <-done:
	case <-time.After(d):
		killed = c.killUntilDone()
	}
	return mono(), killed
}

// addFault records a fault.
func (c *cluster) addFault(f fault) {
	c.mu.Lock()
	c.faults = append(c.faults, f)
	c.mu.Unlock()
}

// awaitHeal adds to fig how long after f healed a child of any key
// started: at most hangBound, past which it is an error.
func (c *cluster) awaitHeal(t *testing.T, f fault, fig *figures) {
	h := c.startedAfter(f.heal, hangBound)
	if h < 0 {
		t.Errorf("after %s, healed at %s: no child started within %v", f.what, c.rel(f.heal), hangBound)
		h = hangBound
	}
	fig.heal, fig.healAfter, fig.healAt = append(fig.heal, h), append(fig.healAfter, f.what), append(fig.healAt, f.heal)
}

// startedAfter waits until a child of every key started after t, for at
// most d, and returns the longest wait, or -1 for a key where none did.
func (c *cluster) startedAfter(t int64, d time.Duration) time.Duration {
	deadline := time.Now().Add(d)
	var longest time.Duration
	for _, key := range c.keys {
		for {
			if s := c.rec.lastStart(key); s > t {
				longest = max(longest, time.Duration(s-t))
				break
			}
			if time.Now().After(deadline) {
				return -1
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return longest
}

// tail keeps the last few KB written to it: a semrun's stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-4096:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
