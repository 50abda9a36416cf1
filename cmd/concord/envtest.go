package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

// The binary is also etcd when started under that name: controller-runtime's
// envtest runs <assets>/etcd and <assets>/kube-apiserver, and one binary
// linked as both (envtestAssets) is all a suite needs. etcd is the version
// Concord is built with, its own main and flags, with one default changed
// (testEtcdTimings).
func runAsEtcdIfNamed(args []string) {
	if filepath.Base(args[0]) == "etcd" {
		etcdmain.Main(testEtcdTimings(args))
		os.Exit(0)
	}
}

// testEtcdTimings adds a 10 ms heartbeat and a 100 ms election timeout to
// the command line of a one-member etcd (no --initial-cluster) that sets
// neither: on loopback a new member then elects itself within 10–100 ms
// instead of etcd's 0.1–1 s (its 1 s election timeout, randomized, less
// the ticks it skips as a single node), which was most of envtest's
// start-up. A command line that sets them, or any cluster, is left as it
// is.
func testEtcdTimings(args []string) []string {
	for _, a := range args[1:] {
		for _, name := range []string{"heartbeat-interval", "election-timeout", "initial-cluster", "config-file", "help", "h", "version"} {
			if a == "-"+name || a == "--"+name || strings.HasPrefix(a, "-"+name+"=") || strings.HasPrefix(a, "--"+name+"=") {
				return args
			}
		}
	}
	return append(slices.Clone(args), "--heartbeat-interval=10", "--election-timeout=100")
}

// envtestAssetsCommand is `concord envtest-assets DIR`: it lays DIR out as
// envtest's KUBEBUILDER_ASSETS (setup-envtest's layout), kube-apiserver and
// etcd being links to this binary and kubectl to the one on PATH, and says
// what to export. Links already there are replaced; other files are not.
func envtestAssetsCommand(args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: concord envtest-assets DIR (the directory to point KUBEBUILDER_ASSETS at)")
	}
	dir, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	links := map[string]string{"kube-apiserver": self, "etcd": self}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		links["kubectl"] = kubectl
	} else {
		fmt.Fprintln(out, "kubectl is not on PATH: envtest needs it only for suites that use its kubectl wrapper; link one into the directory if yours does")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		target, ok := links[name]
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		if fi, err := os.Lstat(path); err == nil {
			if fi.Mode()&os.ModeSymlink == 0 {
				return fmt.Errorf("%s exists and is not a link: move it away, or pick another directory", path)
			}
			if err := os.Remove(path); err != nil {
				return err
			}
		}
		if err := os.Symlink(target, path); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "export KUBEBUILDER_ASSETS=%s\n", dir)
	return nil
}
