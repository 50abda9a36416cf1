package e2e

// The harness of the fault tests (fault_test.go): a real 3-member etcd
// cluster (built from ./deploy/etcd), concord replicas on fixed loopback
// ports and HAProxy in front of them, configured as deploy/local does. Every
// process can be stopped (SIGTERM), killed (SIGKILL) and started again with
// the same flags, ports and data.
//
// The fault tests do not call t.Parallel: they run one at a time, before
// the package's parallel tests, so that their timing bounds (elections,
// health checks, shutdown delays) hold on a 2-core machine.

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Bounds of the harness's waits.
const (
	etcdHealthyTimeout = 30 * time.Second
	lbReadyTimeout     = 20 * time.Second
	replicaReadyWait   = 30 * time.Second
	healthPoll         = 50 * time.Millisecond
	// logTailLines of each process's log are printed when a test fails.
	logTailLines = 120
)

// Flags every replica of the fault tests gets: deploy/local's shutdown
// delay (above HAProxy's inter × fall = 1.5s, so the balancer has stopped
// sending before the replica stops taking requests), a short etcd request
// timeout, and no compaction of its own (the tests compact when they mean
// to); and openServingFlags (plain HTTP, open to all).
var faultReplicaFlags = append([]string{
	"--shutdown-delay-duration", "2s",
	"--etcd-request-timeout", "2s",
	"--etcd-compaction-interval", "0",
}, openServingFlags...)

// haproxyPath is Debian's HAProxy; CI installs it.
const haproxyPath = "/usr/sbin/haproxy"

var (
	etcdBuildOnce sync.Once
	etcdBinPath   string
	etcdBuildErr  error
)

// etcdBinary builds ./deploy/etcd once per test binary, next to concordBin
// (TestMain deletes that directory).
func etcdBinary(t *testing.T) string {
	t.Helper()
	etcdBuildOnce.Do(func() {
		etcdBinPath = filepath.Join(filepath.Dir(concordBin), "etcd")
		out, err := exec.Command("go", "build", "-o", etcdBinPath, "github.com/concord-dev/concord/deploy/etcd").CombinedOutput()
		if err != nil {
			etcdBuildErr = fmt.Errorf("go build of deploy/etcd failed: %v\n%s", err, out)
		}
	})
	if etcdBuildErr != nil {
		t.Fatal(etcdBuildErr)
	}
	return etcdBinPath
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (if the process still runs) and waits for the exit.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	if !p.running() {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Logf("%s: SIGKILL: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(killTimeout):
		t.Errorf("%s: still running %s after SIGKILL", p.name, killTimeout)
	}
}

// logTail is the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := p.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// loopbackPorts returns n distinct ports that were free on 127.0.0.1 a
// moment ago.
func loopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		if len(seen) > 10*n {
			t.Fatalf("could not find %d distinct free ports", n)
		}
		p := freeLoopbackPort(t)
		if !seen[p] {
			ports = append(ports, p)
		}
		seen[p] = true
	}
	return ports
}

// healthClient is for health probes: short, and never reusing a connection
// to a process that may have died.
var healthClient = &http.Client{
	Timeout:   3 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// probe GETs url and returns the status code and body (0 when there was no
// answer).
func probe(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b)
}

// waitFor polls cond every healthPoll for at most d; cond says what is not
// yet as wanted ("" once it is). It returns how long it took, or fails the
// test with the last answer.
func waitFor(t *testing.T, what string, d time.Duration, cond func() string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for {
		why := cond()
		if why == "" {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, d, why)
		}
		time.Sleep(healthPoll)
	}
}

// wantOK is a cond for waitFor: url answers 200.
func wantOK(ctx context.Context, url string) func() string {
	return func() string {
		code, body := probe(ctx, url)
		if code == http.StatusOK {
			return ""
		}
		return fmt.Sprintf("GET %s: %d %s", url, code, strings.TrimSpace(body))
	}
}

// etcdMember is one member of the cluster; start starts it with the same
// flags and data directory every time.
type etcdMember struct {
	name      string
	clientURL string
	args      []string
	dir       string
	p         *proc
}

type etcdCluster struct {
	members   []*etcdMember
	endpoints []string
	// client talks to every member, for the tests' own compactions and
	// reads.
	client *clientv3.Client
}

// startEtcdCluster starts a 3-member etcd cluster on free loopback ports,
// each member with its own data directory, and waits until every member
// reports healthy (has a leader).
func startEtcdCluster(t *testing.T) *etcdCluster {
	t.Helper()
	return startEtcdClusterWith(t, etcdClusterOptions{})
}

// startEtcdClusterWith is startEtcdCluster with options.
func startEtcdClusterWith(t *testing.T, opts etcdClusterOptions) *etcdCluster {
	t.Helper()
	etcdBinary(t) // build it before anything starts
	ports := loopbackPorts(t, 6)
	c := &etcdCluster{}
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("etcd%d=http://127.0.0.1:%d", i+1, ports[3+i]))
		c.endpoints = append(c.endpoints, fmt.Sprintf("http://127.0.0.1:%d", ports[i]))
	}
	for i := range 3 {
		m := &etcdMember{name: fmt.Sprintf("etcd%d", i+1), clientURL: c.endpoints[i], dir: t.TempDir()}
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[3+i])
		// On a restart the data directory holds the member, and the
		// initial-cluster flags are ignored.
		m.args = []string{
			"--name", m.name,
			"--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "concord-fault-test",
		}
		if !opts.Fsync {
			// Process kills do not lose what the kernel holds; the tests
			// do not crash the machine.
			m.args = append(m.args, "--unsafe-no-fsync")
		}
		c.members = append(c.members, m)
	}
	for i := range c.members {
		c.start(t, i)
	}
	for i := range c.members {
		c.waitHealthy(t, i)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	c.client = client
	return c
}

// start starts member i (again); it does not wait for it.
func (c *etcdCluster) start(t *testing.T, i int) {
	t.Helper()
	m := c.members[i]
	if m.p != nil && m.p.running() {
		t.Fatalf("%s: start: still running", m.name)
	}
	m.p = startProc(t, m.name, m.dir, etcdBinary(t), m.args...)
}

// waitHealthy waits until member i's /health answers 200: it runs and the
// cluster has a leader it knows.
func (c *etcdCluster) waitHealthy(t *testing.T, i int) {
	t.Helper()
	waitFor(t, c.members[i].name+" healthy", etcdHealthyTimeout, wantOK(t.Context(), c.members[i].clientURL+"/health"))
}

// restart starts member i again and waits until it is healthy.
func (c *etcdCluster) restart(t *testing.T, i int) {
	t.Helper()
	c.start(t, i)
	c.waitHealthy(t, i)
}

// stop sends SIGTERM to member i and waits for its exit.
func (c *etcdCluster) stop(t *testing.T, i int) {
	t.Helper()
	m := c.members[i]
	if err := m.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", m.name, err)
	}
	m.p.waitExit(t, exitTimeout)
}

// freeze sends SIGSTOP to member i: it keeps its sockets open and answers
// nothing, as a partitioned member does. The test's cleanup thaws it so
// that it can be stopped.
func (c *etcdCluster) freeze(t *testing.T, i int) {
	t.Helper()
	m := c.members[i]
	if err := m.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("%s: SIGSTOP: %v", m.name, err)
	}
	t.Cleanup(func() { _ = m.p.cmd.Process.Signal(syscall.SIGCONT) })
}

// thaw sends SIGCONT to a frozen member i.
func (c *etcdCluster) thaw(t *testing.T, i int) {
	t.Helper()
	m := c.members[i]
	if err := m.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("%s: SIGCONT: %v", m.name, err)
	}
}

// leader returns the index of the member that is the leader now.
func (c *etcdCluster) leader(t *testing.T) int {
	t.Helper()
	for attempt := 0; attempt < 50; attempt++ {
		for i, m := range c.members {
			if !m.p.running() {
				continue
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			st, err := c.client.Status(ctx, m.clientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no etcd member says it is the leader")
	return -1
}

// compact compacts etcd's history at the current revision and returns it.
func (c *etcdCluster) compact(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, "/fault-test-compact-probe")
	if err != nil {
		t.Fatalf("etcd get (for the revision to compact at): %v", err)
	}
	rev := resp.Header.Revision
	if _, err := c.client.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("etcd compact at %d: %v", rev, err)
	}
	return rev
}

// faultReplica is a concord replica on a fixed port, so that it can be
// started again where the load balancer expects it.
type faultReplica struct {
	name string
	port int
	url  string
	args []string
	dir  string
	p    *proc
}

// startFaultReplicas starts n concord replicas on free loopback ports,
// with every etcd member in --etcd-servers and extraArgs after
// faultReplicaFlags (so they may override them), and waits until each
// one's /readyz is ok.
func startFaultReplicas(t *testing.T, etcd *etcdCluster, n int, extraArgs ...string) []*faultReplica {
	t.Helper()
	ports := loopbackPorts(t, n)
	replicas := make([]*faultReplica, n)
	for i := range replicas {
		r := &faultReplica{
			name: fmt.Sprintf("concord%d", i+1),
			port: ports[i],
			url:  fmt.Sprintf("http://127.0.0.1:%d", ports[i]),
			dir:  t.TempDir(),
		}
		r.args = append([]string{
			"--etcd-servers", strings.Join(etcd.endpoints, ","),
			"--bind-address", "127.0.0.1", "--port", strconv.Itoa(r.port),
			"--log-format", "json",
		}, faultReplicaFlags...)
		r.args = append(r.args, extraArgs...)
		replicas[i] = r
		r.start(t)
	}
	for _, r := range replicas {
		r.waitReady(t)
	}
	return replicas
}

// start starts the replica (again) on its port and waits for its ready
// line; waitReady waits for /readyz.
func (r *faultReplica) start(t *testing.T) {
	t.Helper()
	if r.p != nil && r.p.running() {
		t.Fatalf("%s: start: still running", r.name)
	}
	r.p = startProc(t, r.name, r.dir, concordBin, r.args...)
	ready := r.p.waitReady(t)
	if ready.URL != r.url {
		t.Fatalf("%s: ready line url = %q; want %q", r.name, ready.URL, r.url)
	}
}

// waitReady waits until /readyz answers 200 and returns how long it took.
func (r *faultReplica) waitReady(t *testing.T) time.Duration {
	t.Helper()
	return waitFor(t, r.name+" /readyz", replicaReadyWait, wantOK(t.Context(), r.url+"/readyz"))
}

// restart starts the replica again on the same port and waits for /readyz.
func (r *faultReplica) restart(t *testing.T) {
	t.Helper()
	r.start(t)
	r.waitReady(t)
}

// kill SIGKILLs the replica and waits for the exit.
func (r *faultReplica) kill(t *testing.T) {
	t.Helper()
	r.p.kill(t)
}

// terminate sends SIGTERM and returns the exit code.
func (r *faultReplica) terminate(t *testing.T) int {
	t.Helper()
	return r.p.terminate(t)
}

// haproxy is HAProxy in front of the replicas, configured as
// deploy/local/haproxy.cfg.in, health checks included.
type haproxy struct {
	url      string
	statsURL string
	p        *proc
}

const haproxyConfig = `# Generated by the fault tests, after deploy/local/haproxy.cfg.in.
global
    maxconn 2000
    log stdout format raw local0

defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 10m
    timeout server 10m
    timeout tunnel 10m
    timeout http-request 30s
    retries 2
    option redispatch

frontend concord
    bind 127.0.0.1:%d
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    timeout check 500ms
    default-server check inter 500ms fall 3 rise 2
%s
listen stats
    bind 127.0.0.1:%d
    stats enable
    stats uri /
`

// startHAProxy writes the configuration, checks it with haproxy -c, starts
// HAProxy and waits until it reports every replica UP.
func startHAProxy(t *testing.T, replicas []*faultReplica) *haproxy {
	t.Helper()
	if _, err := os.Stat(haproxyPath); err != nil {
		t.Fatalf("the fault tests run HAProxy at %s: %v; install it with: apt-get install -y haproxy", haproxyPath, err)
	}
	ports := loopbackPorts(t, 2)
	var servers strings.Builder
	for _, r := range replicas {
		fmt.Fprintf(&servers, "    server %s 127.0.0.1:%d\n", r.name, r.port)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, haproxyConfig, ports[0], servers.String(), ports[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(haproxyPath, "-c", "-q", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c rejected %s: %v\n%s", cfg, err, out)
	}
	lb := &haproxy{
		url:      fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		statsURL: fmt.Sprintf("http://127.0.0.1:%d/;csv", ports[1]),
	}
	lb.p = startProc(t, "haproxy", dir, haproxyPath, "-db", "-f", cfg)
	waitFor(t, "HAProxy /readyz", lbReadyTimeout, wantOK(t.Context(), lb.url+"/readyz"))
	for _, r := range replicas {
		lb.waitServer(t, r.name, "UP")
	}
	return lb
}

// serverStates is what HAProxy's stats say of each server of the backend:
// UP, DOWN, "UP 1/2" (going down), "DOWN 1/2" (going up), MAINT...
func (lb *haproxy) serverStates(ctx context.Context) (map[string]string, error) {
	code, body := probe(ctx, lb.statsURL)
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", lb.statsURL, code, body)
	}
	r := csv.NewReader(bufio.NewReader(strings.NewReader(strings.TrimPrefix(body, "# "))))
	r.FieldsPerRecord = -1
	records, err := r.ReadAll()
	if err != nil || len(records) == 0 {
		return nil, fmt.Errorf("HAProxy stats CSV: %v: %q", err, body)
	}
	col := map[string]int{}
	for i, name := range records[0] {
		col[name] = i
	}
	states := map[string]string{}
	for _, rec := range records[1:] {
		if len(rec) > col["status"] && rec[col["pxname"]] == "replicas" && rec[col["svname"]] != "BACKEND" {
			states[rec[col["svname"]]] = rec[col["status"]]
		}
	}
	return states, nil
}

// waitServer waits until HAProxy reports server in state (UP or DOWN).
func (lb *haproxy) waitServer(t *testing.T, server, state string) time.Duration {
	t.Helper()
	return waitFor(t, fmt.Sprintf("HAProxy: server %s %s", server, state), lbReadyTimeout, func() string {
		states, err := lb.serverStates(t.Context())
		if err != nil {
			return err.Error()
		}
		if states[server] != state {
			return fmt.Sprintf("states %v", states)
		}
		return ""
	})
}

// etcdClusterOptions change how startEtcdClusterWith starts the members;
// the zero value is startEtcdCluster's cluster.
type etcdClusterOptions struct {
	// Fsync keeps etcd's fsync of its WAL and database on (no
	// --unsafe-no-fsync): a commit then takes as long as on a real disk,
	// which widens the window in which a member dies with a transaction
	// committed but not yet answered.
	Fsync bool
}

// kill SIGKILLs member i and waits for its exit: it stops wherever it is,
// with requests in flight; restart starts it again.
func (c *etcdCluster) kill(t *testing.T, i int) {
	t.Helper()
	c.members[i].p.kill(t)
}
