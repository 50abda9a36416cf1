package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvtestAssetsCommand: the directory gets kube-apiserver and etcd
// linked to this binary (kubectl too when on PATH), links there before are
// replaced, a file that is not a link is refused, and the export line is
// printed.
func TestEnvtestAssetsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "assets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nowhere", filepath.Join(dir, "etcd")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := envtestAssetsCommand([]string{dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "export KUBEBUILDER_ASSETS="+dir+"\n") {
		t.Errorf("output %q; want the export line", out.String())
	}
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != self {
			t.Errorf("%s -> %q (%v); want %s", name, target, err, self)
		}
	}

	if err := os.Remove(filepath.Join(dir, "etcd")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("a real etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := envtestAssetsCommand([]string{dir}, &out); err == nil || !strings.Contains(err.Error(), "exists and is not a link") {
		t.Errorf("over a regular file: %v; want it refused", err)
	}
	if err := envtestAssetsCommand(nil, &out); err == nil || !strings.Contains(err.Error(), "usage: concord envtest-assets DIR") {
		t.Errorf("no directory: %v; want the usage", err)
	}
}

// TestTestEtcdTimings: a one-member etcd without timings gets the short
// ones; a command line that sets a timing, names a cluster, or asks for
// help or the version is left alone.
func TestTestEtcdTimings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"etcd", "--data-dir=/d", "--listen-client-urls=http://127.0.0.1:1"}, "etcd --data-dir=/d --listen-client-urls=http://127.0.0.1:1 --heartbeat-interval=10 --election-timeout=100"},
		{[]string{"etcd"}, "etcd --heartbeat-interval=10 --election-timeout=100"},
		{[]string{"etcd", "--election-timeout=500"}, "etcd --election-timeout=500"},
		{[]string{"etcd", "--heartbeat-interval", "50"}, "etcd --heartbeat-interval 50"},
		{[]string{"etcd", "-initial-cluster=a=http://x:2380,b=http://y:2380"}, "etcd -initial-cluster=a=http://x:2380,b=http://y:2380"},
		{[]string{"etcd", "--help"}, "etcd --help"},
		{[]string{"etcd", "--version"}, "etcd --version"},
	} {
		if got := strings.Join(testEtcdTimings(tc.args), " "); got != tc.want {
			t.Errorf("%q: %q; want %q", tc.args, got, tc.want)
		}
	}
}
