package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReplicaStartsWithoutEtcdQuorum: a replica started while etcd has no
// quorum (as during a leader election, only longer) does not exit: it
// serves, /readyz names the start-up steps that wait for etcd, and once
// the quorum is back it finishes them (the system namespaces are stored)
// and becomes ready. The old replica exited once --etcd-dial-timeout
// passed, or when a start-up write's outcome was unknown.
func TestReplicaStartsWithoutEtcdQuorum(t *testing.T) {
	etcd := startEtcdCluster(t)
	etcd.stop(t, 1)
	etcd.stop(t, 2)

	port := loopbackPorts(t, 1)[0]
	r := &faultReplica{name: "concord1", port: port, url: fmt.Sprintf("http://127.0.0.1:%d", port), dir: t.TempDir()}
	r.args = append([]string{
		"--etcd-servers", strings.Join(etcd.endpoints, ","),
		"--bind-address", "127.0.0.1", "--port", strconv.Itoa(port),
		"--log-format", "json",
	}, faultReplicaFlags...)
	// RBAC, for its start-up step; a short dial timeout, which the old
	// replica exited after.
	const dialTimeout = 3 * time.Second
	r.args = append(r.args, "--authorization-mode", "RBAC", "--etcd-dial-timeout", dialTimeout.String())
	r.start(t) // its ready line comes after the dial timeout: serving, not ready

	want := strings.Join([]string{
		"[+]ping ok",
		"[-]etcd failed: reason withheld",
		"[-]poststarthook/start-system-namespaces-controller failed: reason withheld",
		"[-]poststarthook/rbac/bootstrap-roles failed: reason withheld",
		"[-]poststarthook/crd-informer-synced failed: reason withheld",
		"[+]shutdown ok",
		"readyz check failed",
	}, "\n")
	// Three dial timeouts without quorum: still up, and not ready.
	for end := time.Now().Add(3 * dialTimeout); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if !r.p.running() {
			t.Fatalf("the replica exited without etcd quorum; want it serving, not ready:\n%s", r.p.logTail(20))
		}
		code, body := probe(t.Context(), r.url+"/readyz?verbose")
		if code != http.StatusInternalServerError || body != want+"\n" {
			t.Fatalf("/readyz?verbose without etcd quorum = %d\n%s\nwant 500\n%s", code, body, want)
		}
	}

	etcd.start(t, 1)
	etcd.start(t, 2)
	took := r.waitReady(t)
	t.Logf("ready %s after the quorum came back", took.Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		resp, err := etcd.client.Get(ctx, "/registry/namespaces/"+ns)
		if err != nil || len(resp.Kvs) != 1 {
			t.Errorf("namespace %s in etcd: %v, %d keys; want it stored by the start-up step", ns, err, len(resp.Kvs))
		}
	}
	if !r.p.running() {
		t.Fatal("the replica exited after the quorum came back")
	}
}
