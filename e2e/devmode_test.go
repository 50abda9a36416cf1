package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// kubectlPath is the kubectl every machine has (shared/README.md).
const kubectlPath = "/usr/bin/kubectl"

// kubectl runs the real kubectl against kubeconfig, with its discovery
// cache in cacheDir, for at most 30 s.
func kubectl(t *testing.T, kubeconfig, cacheDir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	args = append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cacheDir, "--request-timeout", "20s"}, args...)
	cmd := exec.CommandContext(ctx, kubectlPath, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

var loopbackURL = regexp.MustCompile(`^http://127\.0\.0\.1:([0-9]+)$`)

func TestDevModeServesAndKeepsDataAcrossRestart(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	dataDir := filepath.Join(tmp, "data")
	cacheDir := filepath.Join(tmp, "kubectl-cache")
	workDir := t.TempDir()

	first := startConcord(t, "concord (first run)", workDir, "--data-dir", dataDir)
	m := loopbackURL.FindStringSubmatch(first.url)
	if m == nil {
		t.Fatalf("ready line url = %q; want http://127.0.0.1:<port>", first.url)
	}
	if port, err := strconv.Atoi(m[1]); err != nil || port <= 0 || port > 65535 {
		t.Fatalf("ready line url = %q; want a real port (--port 0 picks one)", first.url)
	}
	if want := filepath.Join(dataDir, "kubeconfig.yaml"); first.kubeconfig != want {
		t.Fatalf("ready line kubeconfig = %q; want %q (the dev-mode default <data-dir>/kubeconfig.yaml)", first.kubeconfig, want)
	}
	raw, err := os.ReadFile(first.kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig named by the ready line: %v", err)
	}
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		t.Fatalf("decode kubeconfig %s: %v\n%s", first.kubeconfig, err, raw)
	}
	if len(kc.Clusters) != 1 || kc.Clusters[0].Cluster.Server != first.url {
		t.Fatalf("kubeconfig clusters = %+v; want one cluster with server %q\n%s", kc.Clusters, first.url, raw)
	}

	out, errOut, err := kubectl(t, first.kubeconfig, cacheDir, "create", "configmap", "flags", "--from-literal=mode=blue")
	if err != nil {
		t.Fatalf("kubectl create configmap flags: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if want := "configmap/flags created\n"; out != want {
		t.Errorf("kubectl create configmap flags printed %q; want %q", out, want)
	}
	out, errOut, err = kubectl(t, first.kubeconfig, cacheDir, "get", "configmap", "flags", "-o", "jsonpath={.data.mode}")
	if err != nil {
		t.Fatalf("kubectl get configmap flags: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if out != "blue" {
		t.Errorf("kubectl get configmap flags -o jsonpath={.data.mode} printed %q; want %q", out, "blue")
	}
	out, errOut, err = kubectl(t, first.kubeconfig, cacheDir, "get", "configmaps")
	if err != nil {
		t.Fatalf("kubectl get configmaps: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if names := tableColumn(out, "NAME"); !contains(names, "flags") {
		t.Errorf("kubectl get configmaps listed %q; want flags among them; output:\n%s", names, out)
	}

	before := doConfigMap(t, http.MethodGet, configMapURL(first.url, "flags"), nil, http.StatusOK)
	if before.UID == "" || before.ResourceVersion == "" {
		t.Fatalf("GET flags: uid %q, resourceVersion %q; want both set", before.UID, before.ResourceVersion)
	}

	first.stopCleanly(t)

	second := startConcord(t, "concord (second run)", workDir, "--data-dir", dataDir)
	after := doConfigMap(t, http.MethodGet, configMapURL(second.url, "flags"), nil, http.StatusOK)
	if got := after.Data["mode"]; got != "blue" {
		t.Errorf("after restart: data.mode = %q; want %q", got, "blue")
	}
	if after.UID != before.UID {
		t.Errorf("after restart: uid = %q; want %q (as before the restart)", after.UID, before.UID)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("after restart: resourceVersion = %q; want %q (as before the restart)", after.ResourceVersion, before.ResourceVersion)
	}
	second.stopCleanly(t)
}

// tableColumn returns the values of column name in kubectl's table output.
func tableColumn(table, name string) []string {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) == 0 {
		return nil
	}
	col := -1
	for i, h := range strings.Fields(lines[0]) {
		if h == name {
			col = i
		}
	}
	if col < 0 {
		return nil
	}
	var values []string
	for _, line := range lines[1:] {
		if f := strings.Fields(line); col < len(f) {
			values = append(values, f[col])
		}
	}
	return values
}

func TestPortTakenSaysWhatToDo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dataDir := filepath.Join(t.TempDir(), "data")

	p := launch(t, "concord", t.TempDir(), "--port", port, "--data-dir", dataDir)
	if code := p.waitExit(t, exitTimeout); code == 0 || code == -1 {
		t.Fatalf("exit code with port %s taken = %d; want a non-zero exit", port, code)
	}
	msg := p.errorLine()
	for _, want := range []string{"cannot listen on 127.0.0.1:" + port, "--port"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error line %q does not contain %q", msg, want)
		}
	}
	// The port is bound before anything else starts.
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("stat --data-dir after a failed bind: %v; want it not created", err)
	}
}

func TestUnreachableEtcdSaysWhichEndpoint(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}

	p := launch(t, "concord", t.TempDir(), "--etcd-servers", endpoint, "--etcd-dial-timeout", "3s")
	if code := p.waitExit(t, exitTimeout); code == 0 || code == -1 {
		t.Fatalf("exit code with etcd at %s down = %d; want a non-zero exit", endpoint, code)
	}
	msg := p.errorLine()
	for _, want := range []string{endpoint, "did not answer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error line %q does not contain %q", msg, want)
		}
	}
	if msgs := p.logMessages(); contains(msgs, "concord ready") {
		t.Errorf("log messages = %q; want no \"concord ready\" without etcd", msgs)
	}
}

func TestInvalidFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := launch(t, "concord", dir, "--port", "70000", "--log-format", "xml")
	if code := p.waitExit(t, exitTimeout); code != 2 {
		t.Fatalf("exit code with --port 70000 --log-format xml = %d; want 2", code)
	}
	log := p.log()
	for _, want := range []string{"--port", "--log-format"} {
		if !strings.Contains(log, want) {
			t.Errorf("stderr does not mention %q; stderr:\n%s", want, log)
		}
	}
	requireEmptyDir(t, "working directory after invalid flags", dir)
}
