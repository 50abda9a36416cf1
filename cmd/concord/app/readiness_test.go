package app

import (
	"net/http"
	"testing"
	"time"

	"github.com/concord-dev/concord/etcdstore/etcdtest"
	"github.com/concord-dev/concord/internal/syncbuf"
)

// TestReadyzToleratesAShortEtcdOutage: /readyz stays ok while etcd does
// not answer for less than the etcd request timeout (an election, a
// starved probe: requests can wait that long), and fails after it. The old
// check failed after one second, so that every replica left the load
// balancer at once during any election.
func TestReadyzToleratesAShortEtcdOutage(t *testing.T) {
	const requestTimeout = 4 * time.Second
	e := etcdtest.Start(t)
	proxy := etcdtest.StartProxy(t, e.Endpoint)
	cfg := DefaultConfig()
	cfg.EtcdServers = []string{proxy.URL}
	cfg.EtcdRequestTimeout = requestTimeout
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	openServing(&cfg)
	base, _, _ := startRun(t, cfg, &syncbuf.Buffer{})
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("before the outage: /readyz = %d %s; want 200", code, body)
	}

	proxy.Freeze()
	frozen := time.Now()
	// Half the request timeout: ready all along.
	for time.Since(frozen) < requestTimeout/2 {
		if code, body := get(t, base+"/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz %s into an etcd outage = %d %s; want 200 until the %s request timeout", time.Since(frozen).Round(time.Millisecond), code, body, requestTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Then not ready, within the request timeout and a probe's time.
	want := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]poststarthook/start-system-namespaces-controller ok\n[+]poststarthook/crd-informer-synced ok\n[+]shutdown ok\nreadyz check failed\n"
	var code int
	var body string
	for code, body = get(t, base+"/readyz?verbose"); code == http.StatusOK && time.Since(frozen) < 3*requestTimeout; code, body = get(t, base+"/readyz?verbose") {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("/readyz failed %s after etcd froze", time.Since(frozen).Round(time.Millisecond))
	if code != http.StatusInternalServerError || body != want {
		t.Fatalf("/readyz?verbose after etcd froze = %d %q; want 500 %q", code, body, want)
	}

	proxy.Thaw()
	for code, body = get(t, base+"/readyz"); code != http.StatusOK && time.Since(frozen) < 6*requestTimeout; code, body = get(t, base+"/readyz") {
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Errorf("/readyz after etcd thawed = %d %s; want 200", code, body)
	}
}
