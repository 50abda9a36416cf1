// BenchmarkWatchFanout measures the watch fan-out of one real concord
// binary on a real etcd: how long it takes to open N watches, how much
// server memory each costs, and how long an update takes to reach every
// watcher, for N = 100, 1000 and 5000. It also counts lost, duplicated and
// out-of-order events (all should be 0); it reports them and never fails on
// a slow machine. Run it with:
//
//	go test ./e2e/ -run '^$' -bench BenchmarkWatchFanout -benchtime 1x
//
// Everything (etcd, the server, the watchers and the writer) runs on this
// machine over 127.0.0.1, so the numbers include the watchers' own CPU.
// ns/op is the wall time of one whole measurement, setup included; the
// metrics are what to read.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/procfs"
)

const (
	// fanoutWrites updates are made at fanoutWriteRate per second.
	fanoutWrites    = 50
	fanoutWriteRate = 20
	// fanoutOpeners watches are being opened at once.
	fanoutOpeners = 64
	// fanoutPhase bounds every phase (opening, delivery, closing).
	fanoutPhase = 60 * time.Second
	// fanoutNoFile is the RLIMIT_NOFILE this process and the server get.
	fanoutNoFile = 65536
)

var (
	raiseNoFileOnce sync.Once
	noFileNote      string // what raiseNoFile did, logged by every run
)

// raiseNoFile raises RLIMIT_NOFILE to fanoutNoFile (or at least the soft
// limit to the hard one, where raising the hard limit is not permitted) so
// that this process and the server it starts can both hold thousands of
// connections. The server inherits the limit: after Setrlimit, os/exec no
// longer restores the original soft limit in children.
func raiseNoFile() {
	raiseNoFileOnce.Do(func() {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			noFileNote = fmt.Sprintf("getrlimit NOFILE: %v", err)
			return
		}
		want := syscall.Rlimit{Cur: max(lim.Max, fanoutNoFile), Max: max(lim.Max, fanoutNoFile)}
		err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
		if err != nil {
			// No CAP_SYS_RESOURCE: keep the hard limit, lift the soft one.
			want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
			if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err2 != nil {
				noFileNote = fmt.Sprintf("setrlimit NOFILE: %v; then %v; limit stays %d/%d", err, err2, lim.Cur, lim.Max)
				return
			}
			noFileNote = fmt.Sprintf("setrlimit NOFILE to %d: %v; using the hard limit %d instead", fanoutNoFile, err, lim.Max)
			return
		}
		noFileNote = fmt.Sprintf("RLIMIT_NOFILE raised from %d/%d to %d/%d", lim.Cur, lim.Max, want.Cur, want.Max)
	})
}

func BenchmarkWatchFanout(b *testing.B) {
	raiseNoFile()
	for _, n := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			var total fanoutResult
			for i := 0; i < b.N; i++ {
				total.add(runFanout(b, n))
			}
			total.report(b, n)
		})
	}
}

// fanoutResult is what one or more measurements found.
type fanoutResult struct {
	runs          int
	latencies     []time.Duration // every watcher × event sample
	open          time.Duration   // summed over runs
	rssPerWatcher float64         // KiB, summed over runs
	lost          int
	dup           int
	outOfOrder    int
	openFailed    int
}

func (r *fanoutResult) add(o fanoutResult) {
	r.runs += o.runs
	r.latencies = append(r.latencies, o.latencies...)
	r.open += o.open
	r.rssPerWatcher += o.rssPerWatcher
	r.lost += o.lost
	r.dup += o.dup
	r.outOfOrder += o.outOfOrder
	r.openFailed += o.openFailed
}

func (r *fanoutResult) report(b *testing.B, n int) {
	if r.runs == 0 {
		return
	}
	slices.Sort(r.latencies)
	ms := func(q float64) float64 {
		if len(r.latencies) == 0 {
			return 0
		}
		i := int(q * float64(len(r.latencies)-1))
		return float64(r.latencies[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(ms(1), "max-ms")
	b.ReportMetric(r.open.Seconds()/float64(r.runs), "open-s")
	b.ReportMetric(r.rssPerWatcher/float64(r.runs), "rss-KiB/watcher")
	b.ReportMetric(float64(r.lost), "lost")
	b.ReportMetric(float64(r.dup), "dup")
	b.ReportMetric(float64(r.outOfOrder), "outoforder")
	b.ReportMetric(float64(r.openFailed), "openfailed")
	b.Logf("watchers=%d: %d latency samples (want %d)", n, len(r.latencies), r.runs*n*fanoutWrites)
}

// fanoutWatcher is one client watch and what it received.
type fanoutWatcher struct {
	maxRV atomic.Int64 // highest resourceVersion received
	ended atomic.Bool  // the stream ended (or failed) before we closed it

	mu      sync.Mutex
	rvs     []int64
	lat     []time.Duration
	badLine string // first line that did not decode, if any
	readErr error
	body    io.ReadCloser
}

// runFanout is one whole measurement with n watchers: its own etcd and
// server, started and stopped here.
func runFanout(b *testing.B, n int) fanoutResult {
	res := fanoutResult{runs: 1}
	etcd := etcdtest.Start(b)
	p := startConcord(b, fmt.Sprintf("concord (watchers=%d)", n), b.TempDir(), "--etcd-servers", etcd.Endpoint)
	defer p.stop(b)
	pid := p.cmd.Process.Pid
	b.Logf("%s; server: %s; each process needs > %d", noFileNote, noFileLimit(pid), n)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	name := fmt.Sprintf("fanout-%d", n)
	created, err := putConfigMap(ctx, http.MethodPost, configMapsURL(p.url), newConfigMap(name, map[string]string{"sent": "0"}), http.StatusCreated)
	if err != nil {
		b.Logf("create ConfigMap: %v", err)
		return res
	}

	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxConnsPerHost:     0,
		MaxIdleConns:        n + 16,
		MaxIdleConnsPerHost: n + 16,
		DisableCompression:  true,
		// Bounds the time to the 200 of a watch, not the stream.
		ResponseHeaderTimeout: fanoutPhase,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	// A first watch starts the server's shared etcd watch, and an update
	// that reaches it shows that watch is live (etcd delivers the first
	// events of a watch from an old revision up to 100 ms late), so that
	// neither one-off cost is counted per watcher or per event.
	cm, err := warmUp(ctx, client, p.url, created)
	if err != nil {
		b.Logf("watchers=%d: warm-up: %v", n, err)
		return res
	}
	watchURL := configMapsURL(p.url) + "?watch=true&resourceVersion=" + cm.ResourceVersion

	rssBefore, err := procfs.VmRSS(pid)
	if err != nil {
		b.Logf("RSS before: %v", err)
	}

	// Open the watches, fanoutOpeners at a time.
	watchers := make([]*fanoutWatcher, n)
	var (
		opened   sync.WaitGroup // every open done (200 or failure)
		readers  sync.WaitGroup // every reader goroutine returned
		openErrs sync.Map       // error text -> count pointer
		failed   atomic.Int64
	)
	sem := make(chan struct{}, fanoutOpeners)
	openStart := time.Now()
	for i := range watchers {
		w := &fanoutWatcher{}
		watchers[i] = w
		opened.Add(1)
		readers.Add(1)
		go func() {
			defer readers.Done()
			sem <- struct{}{}
			body, err := openWatch(ctx, client, watchURL)
			<-sem
			if err != nil {
				failed.Add(1)
				w.ended.Store(true)
				c, _ := openErrs.LoadOrStore(err.Error(), new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
				opened.Done()
				return
			}
			w.mu.Lock()
			w.body = body
			w.mu.Unlock()
			opened.Done()
			w.read(ctx, body)
		}()
	}
	if !waitGroupFor(&opened, fanoutPhase) {
		b.Logf("watchers=%d: not all watches open after %s", n, fanoutPhase)
	}
	res.open = time.Since(openStart)
	res.openFailed = int(failed.Load())
	openErrs.Range(func(k, v any) bool {
		b.Logf("watchers=%d: %d watches failed to open: %s", n, v.(*atomic.Int64).Load(), k)
		return true
	})

	rssAfter, err := procfs.VmRSS(pid)
	if err != nil {
		b.Logf("RSS after: %v", err)
	}
	if okOpen := n - res.openFailed; okOpen > 0 && rssBefore > 0 && rssAfter > 0 {
		res.rssPerWatcher = float64(rssAfter-rssBefore) / float64(okOpen)
	}
	b.Logf("watchers=%d: server RSS %d KiB before, %d KiB with the watches open", n, rssBefore, rssAfter)

	// The writer: fanoutWrites updates at a fixed rate, each stamped with
	// the time it was sent.
	var (
		want      []int64 // resourceVersions of the updates, in order
		putErrors int
	)
	interval := time.Second / fanoutWriteRate
	writeStart := time.Now()
	for i := range fanoutWrites {
		if time.Since(writeStart) > fanoutPhase {
			b.Logf("watchers=%d: stopped writing after %d of %d updates: %s is up", n, i, fanoutWrites, fanoutPhase)
			break
		}
		if d := time.Until(writeStart.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		next := cm.DeepCopy()
		next.Data = map[string]string{"sent": strconv.FormatInt(time.Now().UnixNano(), 10), "seq": strconv.Itoa(i)}
		updated, err := putConfigMap(ctx, http.MethodPut, configMapURL(p.url, name), next, http.StatusOK)
		if err != nil {
			putErrors++
			if putErrors <= 3 {
				b.Logf("watchers=%d: update %d: %v", n, i, err)
			}
			continue
		}
		rv, err := strconv.ParseInt(updated.ResourceVersion, 10, 64)
		if err != nil {
			b.Logf("watchers=%d: update %d: resourceVersion %q: %v", n, i, updated.ResourceVersion, err)
			continue
		}
		want = append(want, rv)
		cm = updated
	}
	if writeTime := time.Since(writeStart); putErrors > 0 || writeTime > 2*fanoutWrites*interval {
		b.Logf("watchers=%d: %d updates took %s (%d failed)", n, fanoutWrites, writeTime.Round(time.Millisecond), putErrors)
	}

	// Wait until every watcher has the last update or its stream ended.
	var last int64
	if len(want) > 0 {
		last = want[len(want)-1]
	}
	deadline := time.Now().Add(fanoutPhase)
	for {
		pending := 0
		for _, w := range watchers {
			if w.maxRV.Load() < last && !w.ended.Load() {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Logf("watchers=%d: %d watchers still lack the last update after %s", n, pending, fanoutPhase)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Close every watch and let the readers return.
	cancel()
	for _, w := range watchers {
		w.mu.Lock()
		if w.body != nil {
			w.body.Close()
		}
		w.mu.Unlock()
	}
	if !waitGroupFor(&readers, fanoutPhase) {
		b.Logf("watchers=%d: readers still running %s after the watches were closed", n, fanoutPhase)
	}

	// Compare what each watcher got with what was written.
	wantSet := make(map[int64]bool, len(want))
	for _, rv := range want {
		wantSet[rv] = true
	}
	var endedEarly, unexpected, badLines int
	var firstBad string
	var firstReadErr error
	for _, w := range watchers {
		w.mu.Lock()
		if w.body == nil { // never opened: counted in openfailed
			w.mu.Unlock()
			continue
		}
		if w.ended.Load() {
			endedEarly++
			if firstReadErr == nil {
				firstReadErr = w.readErr
			}
		}
		if w.badLine != "" {
			badLines++
			firstBad = w.badLine
		}
		seen := make(map[int64]bool, len(w.rvs))
		var top int64
		for _, rv := range w.rvs {
			switch {
			case seen[rv]:
				res.dup++
			case rv < top:
				res.outOfOrder++
			}
			if !wantSet[rv] && !seen[rv] {
				unexpected++
			}
			seen[rv] = true
			top = max(top, rv)
		}
		for _, rv := range want {
			if !seen[rv] {
				res.lost++
			}
		}
		res.latencies = append(res.latencies, w.lat...)
		w.mu.Unlock()
	}
	if endedEarly > 0 {
		b.Logf("watchers=%d: %d watch streams ended before they were closed (first error: %v)", n, endedEarly, firstReadErr)
	}
	if unexpected > 0 {
		b.Logf("watchers=%d: %d events with a resourceVersion no update returned", n, unexpected)
	}
	if badLines > 0 {
		b.Logf("watchers=%d: %d watchers got an undecodable or non-MODIFIED line, e.g. %s", n, badLines, firstBad)
	}
	return res
}

// warmUp watches cm from its resourceVersion, updates it and waits (at
// most fanoutPhase) until the watch delivers that update; it returns the
// updated ConfigMap.
func warmUp(ctx context.Context, client *http.Client, base string, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(ctx, fanoutPhase)
	defer cancel()
	body, err := openWatch(ctx, client, configMapsURL(base)+"?watch=true&resourceVersion="+cm.ResourceVersion)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	next := cm.DeepCopy()
	next.Data = map[string]string{"sent": "0", "seq": "warm-up"}
	updated, err := putConfigMap(ctx, http.MethodPut, configMapURL(base, cm.Name), next, http.StatusOK)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(body)
	for {
		line, err := r.ReadBytes('\n')
		var ev struct {
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if json.Unmarshal(line, &ev) == nil && ev.Object.Metadata.ResourceVersion == updated.ResourceVersion {
			return updated, nil
		}
		if err != nil {
			return nil, fmt.Errorf("watch ended before the update %s arrived: %w", updated.ResourceVersion, err)
		}
	}
}

// openWatch sends the watch request and returns the stream once the 200
// response headers are in.
func openWatch(ctx context.Context, client *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("watch: code %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return resp.Body, nil
}

// read records every event of the stream until it ends.
func (w *fanoutWatcher) read(ctx context.Context, body io.Reader) {
	r := bufio.NewReaderSize(body, 8<<10)
	for {
		line, err := r.ReadBytes('\n')
		now := time.Now()
		if len(bytes.TrimSpace(line)) > 0 {
			w.record(line, now)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.mu.Lock()
				w.readErr = err
				w.mu.Unlock()
				w.ended.Store(true)
			}
			return
		}
	}
}

func (w *fanoutWatcher) record(line []byte, now time.Time) {
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		} `json:"object"`
	}
	bad := func() {
		w.mu.Lock()
		if w.badLine == "" {
			w.badLine = string(bytes.TrimSpace(line))
		}
		w.mu.Unlock()
	}
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type != "MODIFIED" {
		bad()
		return
	}
	rv, err1 := strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
	sent, err2 := strconv.ParseInt(ev.Object.Data["sent"], 10, 64)
	if err1 != nil || err2 != nil {
		bad()
		return
	}
	w.mu.Lock()
	w.rvs = append(w.rvs, rv)
	w.lat = append(w.lat, now.Sub(time.Unix(0, sent)))
	w.mu.Unlock()
	if rv > w.maxRV.Load() {
		w.maxRV.Store(rv)
	}
}

// putConfigMap sends cm and decodes the ConfigMap answered with wantCode.
func putConfigMap(ctx context.Context, method, url string, cm *corev1.ConfigMap, wantCode int) (*corev1.ConfigMap, error) {
	code, body, err := request(ctx, method, url, cm)
	if err != nil {
		return nil, err
	}
	if code != wantCode {
		return nil, fmt.Errorf("%s %s: code %d; want %d; body: %s", method, url, code, wantCode, body)
	}
	var out corev1.ConfigMap
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("%s %s: decode ConfigMap: %w; body: %s", method, url, err, body)
	}
	return &out, nil
}

// waitGroupFor waits at most d for wg and reports whether it finished.
func waitGroupFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// noFileLimit is the "Max open files" line of process pid, or "".
func noFileLimit(pid int) string {
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return ""
}

// stop sends SIGTERM and waits (bounded) for the exit; it only logs what
// went wrong, and kills the process if it does not exit.
func (p *proc) stop(tb testing.TB) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Logf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 || !contains(p.logMessages(), "stopped") {
			tb.Logf("%s: exit code %d after SIGTERM; log:\n%s", p.name, code, p.log())
		}
	case <-time.After(exitTimeout):
		tb.Logf("%s: still running %s after SIGTERM; killing it", p.name, exitTimeout)
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(killTimeout):
			tb.Logf("%s: still running %s after SIGKILL", p.name, killTimeout)
		}
	}
}
