package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults of MonitorConfig.
const (
	// DefaultProbeInterval: each member is probed this often.
	DefaultProbeInterval = 500 * time.Millisecond
	// DefaultProbeTimeout bounds one probe: a member that has not answered
	// within it is taken out of the client's endpoints.
	DefaultProbeTimeout = time.Second
	// DefaultReadyWithin: Check passes while the last linearizable read
	// that succeeded was sent at most this long ago.
	DefaultReadyWithin = time.Second
	// DefaultStallAfter: a request out on a member for longer than this
	// counts against it in Member's choice. Well above what a healthy
	// member takes, well under the probe timeout.
	DefaultStallAfter = 500 * time.Millisecond
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Client is the configuration the monitored client was made with. The
	// monitor makes a client of its own per endpoint of Client.Endpoints,
	// with the same TLS, keepalive and logger.
	Client clientv3.Config
	// Prefix is the store's key prefix: a probe reads <prefix>/health,
	// counting keys only, as Store.Check does.
	Prefix string
	// ProbeInterval, ProbeTimeout and ReadyWithin: 0 means the default.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	ReadyWithin   time.Duration
	// StallAfter: 0 means DefaultStallAfter (see Member).
	StallAfter time.Duration
	// Logger receives a line when a member is taken out or comes back
	// (nil: none).
	Logger *slog.Logger
	// Registerer, when set, receives the monitor's gauges:
	//
	//	concord_etcd_endpoint_healthy{endpoint}                    1 or 0
	//	concord_etcd_endpoint_last_check_timestamp_seconds{endpoint}
	Registerer prometheus.Registerer
}

// Monitor keeps a client's requests away from etcd members that do not
// answer. A member that stops answering without closing its connections
// (frozen, or cut off by a partition) keeps getting a client's requests
// until gRPC's keepalive gives up on it, which takes tens of seconds; so
// the monitor probes every member on its own connection, every
// ProbeInterval, with a linearizable read that needs a leader and must be
// answered within ProbeTimeout, and sets the client's endpoints to the
// members whose last probe succeeded (to all of them when none did: a
// client needs endpoints to recover). Requests sent to a member before it
// was taken out still wait for their own deadline; the store's own
// requests go to the member Member picks, on the monitor's connections,
// and are sent again elsewhere when it does not answer (hedge.go).
//
// Check reports from the probes' results without asking etcd, so that a
// health check answers at once. With one endpoint the monitor only
// provides Check.
type Monitor struct {
	client      *clientv3.Client
	endpoints   []string
	probes      []*clientv3.Client
	key         string
	interval    time.Duration
	timeout     time.Duration
	readyWithin time.Duration
	stallAfter  time.Duration
	log         *slog.Logger

	mu      sync.Mutex
	members []memberState // as endpoints
	// active are the endpoints the client was last given.
	active []string
	// lastOK is when the latest successful probe was sent.
	lastOK time.Time
	closed bool
	// nextRead is where Member starts looking for a member, so that
	// requests go round the members.
	nextRead int

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type memberState struct {
	healthy bool
	checked time.Time // when the last probe ended (zero: not yet)
	err     error     // of the last probe
	sent    time.Time // when the probe in flight was sent (zero: none)
	reads   int       // requests out on its connection (Member)
	stalls  int       // of those, the ones out for longer than stallAfter
}

// EndpointState is what the monitor knows of one member.
type EndpointState struct {
	Endpoint string
	// Healthy: the last probe succeeded (true before the first one ends).
	Healthy bool
	// Checked is when the last probe ended; zero before the first.
	Checked time.Time
	// Err is the last probe's error.
	Err error
}

// StartMonitor starts monitoring the members of cfg.Client.Endpoints for
// client, which must have been made with that configuration and no
// AutoSyncInterval (the monitor sets its endpoints). It returns once every
// member was probed once (at most ProbeTimeout). Close stops it.
func StartMonitor(client *clientv3.Client, cfg MonitorConfig) (*Monitor, error) {
	if len(cfg.Client.Endpoints) == 0 {
		return nil, errors.New("etcd endpoint monitor: no endpoints")
	}
	m := &Monitor{
		client:      client,
		endpoints:   slices.Clone(cfg.Client.Endpoints),
		key:         "/" + strings.Trim(cfg.Prefix, "/") + "/health",
		interval:    orDefault(cfg.ProbeInterval, DefaultProbeInterval),
		timeout:     orDefault(cfg.ProbeTimeout, DefaultProbeTimeout),
		readyWithin: orDefault(cfg.ReadyWithin, DefaultReadyWithin),
		stallAfter:  orDefault(cfg.StallAfter, DefaultStallAfter),
		log:         cfg.Logger,
		stop:        make(chan struct{}),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.active = m.endpoints
	for _, ep := range m.endpoints {
		pcfg := cfg.Client
		pcfg.Endpoints = []string{ep}
		pcfg.AutoSyncInterval = 0
		probe, err := clientv3.New(pcfg)
		if err != nil {
			m.closeProbes()
			return nil, fmt.Errorf("etcd endpoint monitor: client for %s: %w", ep, err)
		}
		m.probes = append(m.probes, probe)
		m.members = append(m.members, memberState{healthy: true})
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(monitorCollector{m}); err != nil {
			m.closeProbes()
			return nil, fmt.Errorf("register etcd endpoint metrics: %w", err)
		}
	}
	var first sync.WaitGroup
	first.Add(len(m.endpoints))
	for i := range m.endpoints {
		m.wg.Go(func() { m.run(i, first.Done) })
	}
	first.Wait()
	return m, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// run probes member i every interval until Close; probed is called after
// the first probe.
func (m *Monitor) run(i int, probed func()) {
	ticker := time.NewTicker(m.interval)
	defer ticker.Stop()
	for {
		m.probe(i)
		if probed != nil {
			probed()
			probed = nil
		}
		select {
		case <-m.stop:
			return
		case <-ticker.C:
		}
	}
}

// probe sends member i a linearizable read and records the outcome. A
// member that has not answered within the probe timeout is taken out of
// the routing then, but its answer is awaited up to ReadyWithin: an
// answer, however late, shows etcd works (a replica starved of CPU gets
// its answers late, and /readyz must not fail for that), while a member
// that stopped answering sends none.
func (m *Monitor) probe(i int) {
	sent := time.Now()
	m.mu.Lock()
	m.members[i].sent = sent
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.probes[i].Ctx(), max(m.timeout, m.readyWithin))
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		_, err := m.probes[i].Get(clientv3.WithRequireLeader(ctx), m.key, clientv3.WithCountOnly())
		if err != nil {
			err = storeError("probe", m.key, err)
		}
		answered <- err
	}()
	late := time.NewTimer(m.timeout)
	defer late.Stop()
	select {
	case err := <-answered:
		m.record(i, sent, err)
		return
	case <-late.C:
		m.record(i, sent, storeError("probe", m.key, context.DeadlineExceeded))
	}
	if err := <-answered; err == nil {
		m.answeredLate(sent)
	}
}

// answeredLate records a probe sent at sent that succeeded after the
// probe timeout: evidence for Check, not for the routing.
func (m *Monitor) answeredLate(sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sent.After(m.lastOK) {
		m.lastOK = sent
	}
}

func (m *Monitor) record(i int, sent time.Time, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	st := &m.members[i]
	was := st.healthy
	st.healthy, st.checked, st.err, st.sent = err == nil, time.Now(), err, time.Time{}
	if err == nil && sent.After(m.lastOK) {
		m.lastOK = sent
	}
	m.routeLocked()
	ep := m.endpoints[i]
	switch {
	case was && err != nil:
		m.log.Warn("etcd member did not answer; requests go to the others", "endpoint", ep, "err", err, "endpoints", strings.Join(m.active, ","))
	case !was && err == nil:
		m.log.Info("etcd member answers again; requests go to it again", "endpoint", ep, "endpoints", strings.Join(m.active, ","))
	}
}

// routeLocked gives the client the healthy members, or all of them when
// none is.
func (m *Monitor) routeLocked() {
	var healthy []string
	for i, st := range m.members {
		if st.healthy {
			healthy = append(healthy, m.endpoints[i])
		}
	}
	if len(healthy) == 0 {
		healthy = m.endpoints
	}
	if slices.Equal(healthy, m.active) {
		return
	}
	m.active = healthy
	m.client.SetEndpoints(healthy...)
}

// CurrentRevision reads etcd's current revision with a linearizable
// count-only read of key, on the monitor's own connection to the member
// Member picks. A read sent again while the first waits for a member that
// stopped answering (registry's revision reader does so) thus goes to
// another member, even before a probe took the silent one out.
func (m *Monitor) CurrentRevision(ctx context.Context, key string) (int64, error) {
	_, client, done := m.Member(nil)
	if client == nil {
		client = m.client
	}
	// Not overtaken: registry's revision reader sends its copies itself.
	defer done(false)
	resp, err := client.Get(ctx, key, clientv3.WithCountOnly(), clientv3.WithLimit(1))
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// Member picks a member for one request and returns its index and the
// monitor's own client of it; done must be called when the request ended,
// with overtaken true if another member answered the request first (a
// copy of it: see hedge.go). A request out for longer than StallAfter and
// overtaken takes its member out, as a failed probe does, until a probe
// succeeds again: a silent member is thus taken out within about the
// hedge delay, rather than the probe timeout, once traffic finds it.
// It prefers, in order: a member not in avoid (those the request was sent
// to already), whose last probe succeeded, with no request out on it for
// longer than StallAfter (a member that stopped answering shows so within
// StallAfter of its first unanswered request, before a probe times out),
// with the fewest requests out; and goes round the members among equals.
// Once the monitor is closed the client is nil: use the monitored one.
func (m *Monitor) Member(avoid []int) (int, *clientv3.Client, func(overtaken bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return -1, nil, func(bool) {}
	}
	best := -1
	for k := range m.members {
		i := (m.nextRead + k) % len(m.members)
		if best < 0 || m.better(i, best, avoid) {
			best = i
		}
	}
	m.nextRead = (best + 1) % len(m.members)
	m.members[best].reads++
	call := &memberCall{i: best, sent: time.Now()}
	call.timer = time.AfterFunc(m.stallAfter, func() { m.stalled(call) })
	return best, m.probes[best], func(overtaken bool) { m.callDone(call, overtaken) }
}

// memberCall is one request out on a member's connection (Member).
type memberCall struct {
	i       int
	sent    time.Time
	timer   *time.Timer
	late    bool // counted in the member's stalls
	settled bool
}

// better: member i is a better pick than j (see Member).
func (m *Monitor) better(i, j int, avoid []int) bool {
	if ai, aj := slices.Contains(avoid, i), slices.Contains(avoid, j); ai != aj {
		return aj
	}
	a, b := m.members[i], m.members[j]
	if a.healthy != b.healthy {
		return a.healthy
	}
	if (a.stalls > 0) != (b.stalls > 0) {
		return b.stalls > 0
	}
	return a.reads < b.reads
}

// stalled counts a request out for StallAfter against its member.
func (m *Monitor) stalled(call *memberCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !call.settled {
		call.late = true
		m.members[call.i].stalls++
	}
}

func (m *Monitor) callDone(call *memberCall, overtaken bool) {
	call.timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	call.settled = true
	st := &m.members[call.i]
	st.reads--
	if call.late {
		st.stalls--
	}
	// By the clock, not the timer: a copy sent at the hedge delay may
	// answer before the stall timer of this one ran.
	if overtaken && time.Since(call.sent) >= m.stallAfter && st.healthy && !m.closed {
		st.healthy = false
		st.err = fmt.Errorf("a request was not answered within %s while another member answered it: %w", m.stallAfter, ErrUnavailable)
		m.routeLocked()
		m.log.Warn("etcd member did not answer; requests go to the others", "endpoint", m.endpoints[call.i], "err", st.err, "endpoints", strings.Join(m.active, ","))
	}
}

// Check reports whether a linearizable read succeeded on some member
// within ReadyWithin: nil, or an error wrapping ErrUnavailable with every
// member's last error. It never waits for etcd; it is the storage health
// check.
func (m *Monitor) Check(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("etcd endpoint monitor: stopped: %w", ErrUnavailable)
	}
	age := time.Since(m.lastOK)
	if !m.lastOK.IsZero() && age <= m.readyWithin {
		return nil
	}
	var errs []string
	for i, st := range m.members {
		switch {
		case !st.sent.IsZero():
			errs = append(errs, fmt.Sprintf("%s: no answer for %s", m.endpoints[i], time.Since(st.sent).Round(time.Millisecond)))
		case st.err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", m.endpoints[i], st.err))
		}
	}
	last := "never"
	if !m.lastOK.IsZero() {
		last = age.Round(time.Millisecond).String() + " ago"
	}
	return fmt.Errorf("no etcd member answered a linearizable read within %s (last: %s; %s): %w",
		m.readyWithin, last, strings.Join(errs, "; "), ErrUnavailable)
}

// Endpoints says what the monitor knows of each member, in the order of
// the configured endpoints.
func (m *Monitor) Endpoints() []EndpointState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]EndpointState, len(m.members))
	for i, st := range m.members {
		out[i] = EndpointState{Endpoint: m.endpoints[i], Healthy: st.healthy, Checked: st.checked, Err: st.err}
	}
	return out
}

// Close stops the probes and closes the monitor's own clients; the
// monitored client keeps the endpoints it has. Safe to call twice.
func (m *Monitor) Close() {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		close(m.stop)
		m.closeProbes() // ends the probes in flight
		m.wg.Wait()
	})
}

func (m *Monitor) closeProbes() {
	for _, p := range m.probes {
		// The error is the context's cancellation, which is what we asked.
		_ = p.Close()
	}
}

var (
	endpointHealthyDesc = prometheus.NewDesc("concord_etcd_endpoint_healthy",
		"Whether the etcd member at endpoint answered this replica's last linearizable probe in time (1) or not (0). Requests go to the healthy members only, or to all when none is.",
		[]string{"endpoint"}, nil)
	endpointCheckedDesc = prometheus.NewDesc("concord_etcd_endpoint_last_check_timestamp_seconds",
		"When this replica's last probe of the etcd member at endpoint ended, in seconds since the Unix epoch (0: not yet).",
		[]string{"endpoint"}, nil)
)

// monitorCollector reads the monitor's state at each scrape.
type monitorCollector struct{ m *Monitor }

func (c monitorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- endpointHealthyDesc
	ch <- endpointCheckedDesc
}

func (c monitorCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.m.Endpoints() {
		healthy, checked := 0.0, 0.0
		if st.Healthy {
			healthy = 1
		}
		if !st.Checked.IsZero() {
			checked = float64(st.Checked.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(endpointHealthyDesc, prometheus.GaugeValue, healthy, st.Endpoint)
		ch <- prometheus.MustNewConstMetric(endpointCheckedDesc, prometheus.GaugeValue, checked, st.Endpoint)
	}
}
