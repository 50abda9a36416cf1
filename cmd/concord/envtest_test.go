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
