package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalClusterScript runs deploy/local/cluster.sh as a user would: up
// brings a 3-member etcd, three replicas and HAProxy to ready, kubectl works
// through the load balancer with the kubeconfig it writes, and down stops
// everything and deletes its state.
func TestLocalClusterScript(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "deploy", "local", "cluster.sh")
	runDir := filepath.Join(root, "deploy", "local", ".run")
	if _, err := os.Stat(runDir); err == nil {
		t.Skipf("%s exists: a local cluster is up on this machine; run '%s down' first", runDir, script)
	}
	base := freePortBlock(t, 82)
	env := append(os.Environ(), fmt.Sprintf("BASE=%d", base))
	run := func(timeout time.Duration, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env, cmd.Dir = env, root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(runDir); err == nil {
			out, _ := exec.Command(script, "down").CombinedOutput()
			t.Logf("cleanup: %s", out)
		}
	})

	out := run(3*time.Minute, script, "up")
	lb := fmt.Sprintf("http://127.0.0.1:%d", base+80)
	if !strings.Contains(out, "ready: "+lb) {
		t.Fatalf("up did not report the load balancer %s:\n%s", lb, out)
	}
	kubeconfig := filepath.Join(runDir, "kubeconfig.yaml")
	run(30*time.Second, "kubectl", "--kubeconfig", kubeconfig, "--cache-dir", t.TempDir(), "create", "configmap", "via-lb", "--from-literal=a=b")
	if got := run(30*time.Second, "kubectl", "--kubeconfig", kubeconfig, "--cache-dir", t.TempDir(), "get", "configmap", "via-lb", "-o", "jsonpath={.data.a}"); got != "b" {
		t.Errorf("read back through the load balancer: %q; want b", got)
	}
	status := run(30*time.Second, script, "status")
	for _, name := range []string{"etcd1", "etcd2", "etcd3", "concord1", "concord2", "concord3", "haproxy"} {
		if !strings.Contains(status, name+": running") {
			t.Errorf("status does not show %s running:\n%s", name, status)
		}
	}
	if strings.Count(status, "/readyz: ok") != 3 {
		t.Errorf("status: want three replicas ready:\n%s", status)
	}

	run(2*time.Minute, script, "down")
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("down left %s behind (%v)", runDir, err)
	}
	if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", base+80), time.Second); err == nil {
		conn.Close()
		t.Errorf("the load balancer still answers after down")
	}
}

// freePortBlock finds a base port such that base+1 … base+n are all free on
// 127.0.0.1 right now (the script takes its ports from BASE).
func freePortBlock(t *testing.T, n int) int {
	t.Helper()
	for base := 20000; base < 60000; base += 1000 {
		free := true
		for p := base + 1; p <= base+n && free; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no block of free loopback ports")
	return 0
}
