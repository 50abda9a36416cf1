package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlDiffAndServerDryRun: kubectl diff shows a difference and exits
// 1 (0 when there is none), and apply, patch and replace with
// --dry-run=server print the result while the stored object stays as it was.
func TestKubectlDiffAndServerDryRun(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}
	manifest := func(mode string) string {
		return k.writeFile(t, "app-"+mode+".yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  mode: "+mode+"\n", 0o644)
	}
	blue, green := manifest("blue"), manifest("green")
	k.run(t, "apply", "-f", blue)

	if out := k.run(t, "diff", "-f", blue); out != "" {
		t.Errorf("kubectl diff of the applied manifest printed %q; want nothing", out)
	}
	out, errOut, err := kubectl(t, k.srv.kubeconfig, k.cacheDir, "diff", "-f", green)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("kubectl diff of a changed manifest: %v (stderr %q); want exit status 1", err, errOut)
	}
	if !strings.Contains(out, "-  mode: blue") || !strings.Contains(out, "+  mode: green") {
		t.Errorf("kubectl diff printed:\n%s\nwant the line mode: blue removed and mode: green added", out)
	}

	stored := func() string { return k.configMap(t, "default", "app").Data["mode"] }
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"apply", []string{"apply", "-f", green}, "green"},
		{"patch", []string{"patch", "configmap", "app", "-p", `{"data":{"mode":"red"}}`}, "red"},
	}
	current := k.run(t, "get", "configmap", "app", "-o", "yaml")
	cases = append(cases, struct {
		name string
		args []string
		want string
	}{"replace", []string{"replace", "-f", k.writeFile(t, "current.yaml", strings.Replace(current, "mode: blue", "mode: violet", 1), 0o644)}, "violet"})
	for _, tc := range cases {
		args := append(tc.args, "--dry-run=server", "-o", "jsonpath={.data.mode}")
		if got := k.run(t, args...); got != tc.want {
			t.Errorf("kubectl %s --dry-run=server printed %q; want %q", tc.name, got, tc.want)
		}
		if got := stored(); got != "blue" {
			t.Fatalf("after kubectl %s --dry-run=server the stored mode is %q; want blue (nothing written)", tc.name, got)
		}
	}
}
