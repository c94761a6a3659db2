// Package redistest starts real redis-server processes on free loopback
// ports for tests, and stops them when the test ends.
package redistest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	dir  string
	port int
	tls  *TLSFiles // nil: plain TCP
	// cluster: a node of a Redis Cluster (see NewCluster).
	cluster bool
	// sentinel is the config file of a Sentinel (see NewSentinel).
	sentinel string
	cmd      *exec.Cmd
	done     chan struct{}
}

// TLSFiles are the PEM files of a server that speaks TLS only.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate and key.
	CertFile, KeyFile string
	// CAFile holds the certificates that sign clients' certificates; the
	// readiness check also trusts it for the server's.
	CAFile string
	// AuthClients makes the server require a client certificate
	// (tls-auth-clients yes); without it, it asks for none.
	AuthClients bool
	// ClientCertFile and ClientKeyFile are the certificate the readiness
	// check presents; CertFile and KeyFile when empty, which then must be
	// valid for client authentication as well.
	ClientCertFile, ClientKeyFile string
}

// Available reports whether redis-server can be started here.
func Available() error {
	_, err := exec.LookPath("redis-server")
	return err
}

// Required reports whether a missing redis-server must fail the tests
// instead of skipping them: in CI it always must.
func Required() bool { return os.Getenv("CI") == "true" }

// Start starts a redis-server keeping its files in dir, with no persistence.
// The caller must Stop it.
func Start(dir string) (*Server, error) { return start(dir, nil) }

// StartTLS starts a redis-server like Start, listening with TLS only on
// loopback: its URL is rediss://. The caller must Stop it.
func StartTLS(dir string, cfg TLSFiles) (*Server, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == "" {
		return nil, errors.New("redistest: TLS needs a certificate, its key and a CA file")
	}
	return start(dir, &cfg)
}

func start(dir string, cfg *TLSFiles) (*Server, error) { return startNode(dir, cfg, false) }

func startNode(dir string, cfg *TLSFiles, cluster bool) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var err error
	for range 5 { // another process may take the free port before redis binds it
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, port: port, tls: cfg, cluster: cluster}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port)))
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"--port", strconv.Itoa(s.port)}
	if s.tls != nil {
		auth := "no"
		if s.tls.AuthClients {
			auth = "yes"
		}
		args = []string{"--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.tls.CertFile, "--tls-key-file", s.tls.KeyFile,
			"--tls-ca-cert-file", s.tls.CAFile, "--tls-auth-clients", auth}
	}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", s.port))
	}
	args = append(args, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning")
	if sock := s.Socket(); sock != "" {
		args = append(args, "--unixsocket", sock, "--unixsocketperm", "700")
	}
	if s.sentinel != "" {
		args = []string{s.sentinel, "--sentinel"} // the file says the rest
	}
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if last = s.ping(); last == nil {
			return nil
		}
		select {
		case <-s.done:
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(string(out)))
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d did not answer within 10s: %w", s.port, last)
}

// Socket is the path of the server's Unix socket, besides its port, or
// empty when its directory's path is too long for a socket's.
func (s *Server) Socket() string {
	path := filepath.Join(s.dir, fmt.Sprintf("redis-%d.sock", s.port))
	if len(path) >= 100 { // sun_path holds 104 to 108 bytes
		return ""
	}
	return path
}

// ping asks the server for its process id, with no client library, and
// checks that it is the one this Server started: another test's server
// may have bound the free port first (this one then fails to bind it, and
// exits), and a test must never run against another test's server.
func (s *Server) ping() error {
	c, err := s.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 || n > 1<<20 {
		return errors.New("unexpected reply " + strconv.Quote(head))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	if !strings.Contains(string(info), fmt.Sprintf("process_id:%d\r\n", s.cmd.Process.Pid)) {
		return fmt.Errorf("port %d is another redis-server's", s.port)
	}
	return nil
}

// dial connects to the server, over TLS for a TLS server.
func (s *Server) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: time.Second}
	if s.tls == nil {
		return d.Dial("tcp", s.Addr)
	}
	cfg, err := s.tls.clientConfig()
	if err != nil {
		return nil, err
	}
	c, err := tls.DialWithDialer(d, "tcp", s.Addr, cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// clientConfig is the readiness check's TLS configuration: it presents the
// client certificate and trusts the CA for the server's certificate,
// whatever names that certificate holds.
func (f *TLSFiles) clientConfig() (*tls.Config, error) {
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", f.CAFile)
	}
	certFile, keyFile := f.ClientCertFile, f.ClientKeyFile
	if certFile == "" && keyFile == "" {
		certFile, keyFile = f.CertFile, f.KeyFile
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// The chain is verified below, with no name: the certificate
		// need not name 127.0.0.1.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		},
	}, nil
}

// URL is the server's redis:// URL, or rediss:// for a TLS server.
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

// Stop ends the server and waits for it. Stopping twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.terminate()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.Kill()
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Restart kills the server and starts an empty one on the same port, as a
// crash without persistence would.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}

// New starts a server for t and stops it when t ends. Without redis-server
// it skips t, or fails it in CI.
func New(t testing.TB) *Server {
	t.Helper()
	return newServer(t, nil)
}

// NewTLS starts a TLS server for t, as StartTLS does, and stops it when t
// ends. Without redis-server it skips t, or fails it in CI.
func NewTLS(t testing.TB, cfg TLSFiles) *Server {
	t.Helper()
	return newServer(t, &cfg)
}

// needServer skips t without redis-server, or fails it in CI.
func needServer(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if Required() {
			t.Fatalf("redis-server is required in CI: %v", err)
		}
		t.Skipf("redis-server not installed: %v", err)
	}
}

// NewCluster starts a cluster for t, as StartCluster does, and stops it
// when t ends. Without redis-server it skips t, or fails it in CI.
func NewCluster(t testing.TB, masters, replicas int) []*Server {
	t.Helper()
	needServer(t)
	nodes, err := StartCluster(t.TempDir(), masters, replicas)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		t.Cleanup(s.Stop)
	}
	return nodes
}

// StartCluster starts a Redis Cluster of masters nodes, each with
// replicas replicas, with redis-cli --cluster create. It returns once
// every node says the cluster is ok, knows every replica, and every
// replica is in sync. The caller must Stop every node; on error none is
// left running.
func StartCluster(dir string, masters, replicas int) ([]*Server, error) {
	var nodes []*Server
	fail := func(err error) ([]*Server, error) {
		for _, s := range nodes {
			s.Stop()
		}
		return nil, err
	}
	var addrs []string
	for range masters * (1 + replicas) {
		s, err := startNode(dir, nil, true)
		if err != nil {
			return fail(err)
		}
		nodes = append(nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("redis-cli --cluster create: %w: %s", err, out))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range nodes {
		for {
			out, err := exec.Command("redis-cli", "-p", strconv.Itoa(s.port), "cluster", "info").Output()
			repl, rerr := exec.Command("redis-cli", "-p", strconv.Itoa(s.port), "info", "replication").Output()
			known, kerr := exec.Command("redis-cli", "-p", strconv.Itoa(s.port), "cluster", "nodes").Output()
			synced := kerr == nil && countReplicas(string(known)) == masters*replicas &&
				(strings.Contains(string(repl), "master_link_status:up") || strings.Count(string(repl), "state=online") == replicas)
			if err == nil && rerr == nil && strings.Contains(string(out), "cluster_state:ok") && synced {
				break
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("cluster node %s: not ok within 30s: %s", s.Addr, out))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes, nil
}

// countReplicas counts the replicas in CLUSTER NODES output, whose third
// field holds the flags.
func countReplicas(nodes string) int {
	n := 0
	for line := range strings.Lines(nodes) {
		if f := strings.Fields(line); len(f) > 2 && slices.Contains(strings.Split(f[2], ","), "slave") {
			n++
		}
	}
	return n
}

// NewSentinel starts a Sentinel for t, as StartSentinel does, and stops
// it when t ends.
func NewSentinel(t testing.TB, name, masterAddr string, quorum int) *Server {
	t.Helper()
	needServer(t)
	s, err := StartSentinel(t.TempDir(), name, masterAddr, quorum)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartSentinel starts a Sentinel that watches the master at masterAddr
// under name, with the given quorum, and notices a master down after a
// second. The caller must Stop it.
func StartSentinel(dir, name, masterAddr string, quorum int) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(masterAddr, ":")
	var last error
	for range 5 { // another process may take the free port before it binds it
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", p))
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nloglevel warning\ndaemonize no\n"+
			"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
			p, dir, name, host, port, quorum, name, name, name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), dir: dir, port: p, sentinel: conf}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

func newServer(t testing.TB, cfg *TLSFiles) *Server {
	t.Helper()
	needServer(t)
	var s *Server
	var err error
	if cfg == nil {
		s, err = Start(t.TempDir())
	} else {
		s, err = StartTLS(t.TempDir(), *cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
