package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/concord-dev/concord/internal/syncbuf"
)

// Bounds of the kubectl workflow.
const (
	kubectlWatchTimeout = 40 * time.Second // the whole background kubectl get -w
	kubectlWatchWait    = 20 * time.Second // for one line of its output
	kubectlPollWait     = 20 * time.Second // for an effect that may be asynchronous
	kubectlPoll         = 100 * time.Millisecond
)

// kubectlSession is kubectl pointed at one server with its own discovery
// cache, as a user of that server would run it.
type kubectlSession struct {
	srv      *proc
	cacheDir string
	tmp      string // where manifests and the editor script go
}

// run runs kubectl and fails the test unless it exits 0; it returns stdout.
func (k *kubectlSession) run(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := kubectl(t, k.srv.kubeconfig, k.cacheDir, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// runEnv is run with extra environment variables (for EDITOR), for at most
// 30 s like the kubectl helper.
func (k *kubectlSession) runEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	full := append([]string{"--kubeconfig", k.srv.kubeconfig, "--cache-dir", k.cacheDir, "--request-timeout", "20s"}, args...)
	cmd := exec.CommandContext(ctx, kubectlPath, full...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(env, " "), strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// fail runs kubectl, fails the test if it exits 0, and returns stdout and
// stderr together.
func (k *kubectlSession) fail(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := kubectl(t, k.srv.kubeconfig, k.cacheDir, args...)
	if err == nil {
		t.Errorf("kubectl %s exited 0; want a failure\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	} else if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("kubectl %s: %v (not an exit status)\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out + errOut
}

// configMap reads a ConfigMap with kubectl get -o json.
func (k *kubectlSession) configMap(t *testing.T, namespace, name string) *corev1.ConfigMap {
	t.Helper()
	out := k.run(t, "-n", namespace, "get", "configmap", name, "-o", "json")
	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatalf("kubectl -n %s get configmap %s -o json: decode: %v\n%s", namespace, name, err, out)
	}
	return &cm
}

// writeFile writes content to a file in the session's temp dir and
// returns its path.
func (k *kubectlSession) writeFile(t *testing.T, name, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(k.tmp, name)
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// httpCode is the status code of a plain GET to the server.
func (k *kubectlSession) httpCode(t *testing.T, path string) (int, []byte) {
	t.Helper()
	return do(t, http.MethodGet, k.srv.url+path, nil)
}

// waitGone polls a GET of path until the server answers 404, for at most
// kubectlPollWait.
func (k *kubectlSession) waitGone(t *testing.T, what, path string) {
	t.Helper()
	deadline := time.Now().Add(kubectlPollWait)
	for {
		code, body := k.httpCode(t, path)
		if code == http.StatusNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: GET %s answers %d after %s; want 404; body: %s", what, path, code, kubectlPollWait, body)
			return
		}
		time.Sleep(kubectlPoll)
	}
}

// waitEmptyList polls a list GET of path until it has no items, for at most
// kubectlPollWait.
func (k *kubectlSession) waitEmptyList(t *testing.T, what, path string) {
	t.Helper()
	deadline := time.Now().Add(kubectlPollWait)
	for {
		code, body := k.httpCode(t, path)
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &list) == nil && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: GET %s answers %d after %s; want 200 with no items; body: %s", what, path, code, kubectlPollWait, body)
			return
		}
		time.Sleep(kubectlPoll)
	}
}

// tableHeader is the column names of the first line of kubectl's table.
func tableHeader(table string) []string {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) == 0 {
		return nil
	}
	return strings.Fields(lines[0])
}

// tableRow is the row of table whose NAME is name, by column name, or nil.
func tableRow(table, name string) map[string]string {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 2 {
		return nil
	}
	header := strings.Fields(lines[0])
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != name {
			continue
		}
		row := map[string]string{}
		for i, h := range header {
			if i < len(f) {
				row[h] = f[i]
			}
		}
		return row
	}
	return nil
}

// linesNamed are the lines of out whose first field is name.
func linesNamed(out, name string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			lines = append(lines, line)
		}
	}
	return lines
}

const appliedV1 = `apiVersion: v1
kind: ConfigMap
metadata:
  name: applied
  namespace: default
data:
  a: "1"
`

const appliedV2 = `apiVersion: v1
kind: ConfigMap
metadata:
  name: applied
  namespace: default
data:
  a: "2"
  b: "3"
`

const appliedV3 = `apiVersion: v1
kind: ConfigMap
metadata:
  name: applied
  namespace: default
data:
  a: "2"
`

// unknownFieldManifest has a field a ConfigMap does not have.
const unknownFieldManifest = `apiVersion: v1
kind: ConfigMap
metadata:
  name: strict
  namespace: default
data:
  k: v
spec:
  x: 1
`

// editorScript is the EDITOR kubectl edit runs on the file it writes.
const editorScript = `#!/bin/sh
sed -i 's/mode: blue/mode: green/' "$1"
`

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TestKubectlWorkflow drives the real kubectl, with the flags a user would
// pass to a real cluster, through the everyday workflow against a dev-mode
// binary, and checks the effect of every step.
func TestKubectlWorkflow(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test drives the real kubectl: %v", err)
	}
	tmp := t.TempDir()
	srv := startConcord(t, "concord", t.TempDir(), "--data-dir", filepath.Join(tmp, "data"))
	if srv.kubeconfig == "" {
		t.Fatalf("ready line names no kubeconfig")
	}
	k := &kubectlSession{srv: srv, cacheDir: filepath.Join(tmp, "kubectl-cache"), tmp: tmp}

	// Each step is a subtest so that the report says which passed; a step
	// that fails stops the later ones that depend on it.
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.Logf("step %s failed", name)
		}
	}

	step("1-create", func(t *testing.T) {
		if out := k.run(t, "create", "configmap", "app", "--from-literal=mode=blue"); out != "configmap/app created\n" {
			t.Errorf("kubectl create configmap printed %q; want %q", out, "configmap/app created\n")
		}
		if out := k.run(t, "create", "secret", "generic", "db", "--from-literal=password=s3cret"); out != "secret/db created\n" {
			t.Errorf("kubectl create secret printed %q; want %q", out, "secret/db created\n")
		}
		if out := k.run(t, "create", "namespace", "team"); out != "namespace/team created\n" {
			t.Errorf("kubectl create namespace printed %q; want %q", out, "namespace/team created\n")
		}
		if cm := k.configMap(t, "default", "app"); !reflect.DeepEqual(cm.Data, map[string]string{"mode": "blue"}) {
			t.Errorf("configmap app data = %v; want map[mode:blue]", cm.Data)
		}
		out := k.run(t, "get", "secret", "db", "-o", "json")
		var secret corev1.Secret
		if err := json.Unmarshal([]byte(out), &secret); err != nil {
			t.Fatalf("kubectl get secret db -o json: %v\n%s", err, out)
		}
		if got := string(secret.Data["password"]); got != "s3cret" || secret.Type != corev1.SecretTypeOpaque {
			t.Errorf("secret db: type %q, data.password %q; want Opaque and s3cret\n%s", secret.Type, got, out)
		}
		if phase := k.run(t, "get", "namespace", "team", "-o", "jsonpath={.status.phase}"); phase != "Active" {
			t.Errorf("namespace team status.phase = %q; want Active", phase)
		}
	})

	step("2-get-tables", func(t *testing.T) {
		out := k.run(t, "get", "configmaps")
		if h := tableHeader(out); !reflect.DeepEqual(h, []string{"NAME", "DATA", "AGE"}) {
			t.Errorf("kubectl get configmaps header = %q; want [NAME DATA AGE]\n%s", h, out)
		}
		if row := tableRow(out, "app"); row == nil || row["DATA"] != "1" {
			t.Errorf("kubectl get configmaps row for app = %v; want DATA 1\n%s", row, out)
		}

		out = k.run(t, "get", "secrets")
		if h := tableHeader(out); !reflect.DeepEqual(h, []string{"NAME", "TYPE", "DATA", "AGE"}) {
			t.Errorf("kubectl get secrets header = %q; want [NAME TYPE DATA AGE]\n%s", h, out)
		}
		if row := tableRow(out, "db"); row == nil || row["TYPE"] != "Opaque" || row["DATA"] != "1" {
			t.Errorf("kubectl get secrets row for db = %v; want TYPE Opaque, DATA 1\n%s", row, out)
		}

		out = k.run(t, "get", "namespaces")
		if h := tableHeader(out); !reflect.DeepEqual(h, []string{"NAME", "STATUS", "AGE"}) {
			t.Errorf("kubectl get namespaces header = %q; want [NAME STATUS AGE]\n%s", h, out)
		}
		for _, ns := range []string{"team", "default", "kube-system", "kube-public", "kube-node-lease"} {
			if row := tableRow(out, ns); row == nil || row["STATUS"] != "Active" {
				t.Errorf("kubectl get namespaces row for %s = %v; want STATUS Active\n%s", ns, row, out)
			}
		}
	})

	step("3-get-yaml", func(t *testing.T) {
		out := k.run(t, "get", "configmap", "app", "-o", "yaml")
		for _, want := range []string{"mode: blue", "resourceVersion:", "uid:", "kind: ConfigMap", "name: app"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl get configmap app -o yaml does not contain %q:\n%s", want, out)
			}
		}
	})

	step("4-apply", func(t *testing.T) {
		manifest := filepath.Join(k.tmp, "applied.yaml")
		k.writeFile(t, "applied.yaml", appliedV1, 0o644)
		if out := k.run(t, "apply", "-f", manifest); out != "configmap/applied created\n" {
			t.Errorf("first kubectl apply printed %q; want %q", out, "configmap/applied created\n")
		}
		cm := k.configMap(t, "default", "applied")
		if !reflect.DeepEqual(cm.Data, map[string]string{"a": "1"}) {
			t.Errorf("after first apply: data = %v; want map[a:1]", cm.Data)
		}
		if cm.Annotations[lastApplied] == "" {
			t.Errorf("after first apply: annotations = %v; want %s", cm.Annotations, lastApplied)
		}

		k.writeFile(t, "applied.yaml", appliedV2, 0o644)
		if out := k.run(t, "apply", "-f", manifest); out != "configmap/applied configured\n" {
			t.Errorf("second kubectl apply printed %q; want %q", out, "configmap/applied configured\n")
		}
		cm = k.configMap(t, "default", "applied")
		if !reflect.DeepEqual(cm.Data, map[string]string{"a": "2", "b": "3"}) {
			t.Errorf("after second apply: data = %v; want map[a:2 b:3]", cm.Data)
		}
		if la := cm.Annotations[lastApplied]; !strings.Contains(la, `"b":"3"`) {
			t.Errorf("after second apply: %s = %q; want the second manifest (with b)", lastApplied, la)
		}

		// Dropping b from the manifest: apply's three-way strategic merge
		// patch deletes it.
		k.writeFile(t, "applied.yaml", appliedV3, 0o644)
		if out := k.run(t, "apply", "-f", manifest); out != "configmap/applied configured\n" {
			t.Errorf("third kubectl apply printed %q; want %q", out, "configmap/applied configured\n")
		}
		cm = k.configMap(t, "default", "applied")
		if !reflect.DeepEqual(cm.Data, map[string]string{"a": "2"}) {
			t.Errorf("after third apply (b removed from the manifest): data = %v; want map[a:2]", cm.Data)
		}
		if la := cm.Annotations[lastApplied]; la == "" || strings.Contains(la, `"b"`) {
			t.Errorf("after third apply: %s = %q; want the third manifest (without b)", lastApplied, la)
		}
	})

	step("5-edit", func(t *testing.T) {
		editor := k.writeFile(t, "editor.sh", editorScript, 0o755)
		if out := k.runEnv(t, []string{"EDITOR=" + editor, "KUBE_EDITOR=" + editor}, "edit", "configmap", "app"); out != "configmap/app edited\n" {
			t.Errorf("kubectl edit printed %q; want %q", out, "configmap/app edited\n")
		}
		if cm := k.configMap(t, "default", "app"); cm.Data["mode"] != "green" {
			t.Errorf("after kubectl edit: data = %v; want mode green", cm.Data)
		}
	})

	step("6-patch", func(t *testing.T) {
		if out := k.run(t, "patch", "configmap", "app", "-p", `{"data":{"extra":"1"}}`); out != "configmap/app patched\n" {
			t.Errorf("kubectl patch (strategic) printed %q; want %q", out, "configmap/app patched\n")
		}
		if cm := k.configMap(t, "default", "app"); cm.Data["extra"] != "1" || cm.Data["mode"] != "green" {
			t.Errorf("after strategic patch: data = %v; want extra 1 and mode green", cm.Data)
		}

		k.run(t, "patch", "configmap", "app", "--type=merge", "-p", `{"data":{"extra":null}}`)
		if cm := k.configMap(t, "default", "app"); !reflect.DeepEqual(cm.Data, map[string]string{"mode": "green"}) {
			t.Errorf("after merge patch extra:null: data = %v; want map[mode:green]", cm.Data)
		}

		k.run(t, "patch", "configmap", "app", "--type=json", "-p", `[{"op":"add","path":"/data/j","value":"x"}]`)
		before := k.configMap(t, "default", "app")
		if !reflect.DeepEqual(before.Data, map[string]string{"mode": "green", "j": "x"}) {
			t.Errorf("after json patch add /data/j: data = %v; want map[j:x mode:green]", before.Data)
		}

		failing := `[{"op":"test","path":"/data/j","value":"nope"}]`
		out := k.fail(t, "patch", "configmap", "app", "--type=json", "-p", failing)
		if !strings.Contains(out, "test") || !strings.Contains(out, "/data/j") {
			t.Errorf("kubectl patch with a failing test op: output %q; want it to say the test of /data/j failed", out)
		}
		// What the server answered kubectl: 422, as kube-apiserver does.
		code, body, err := requestPatch(t.Context(), configMapURL(k.srv.url, "app"), "application/json-patch+json", failing)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusUnprocessableEntity {
			t.Errorf("PATCH with a failing test op: code %d; want 422; body: %s", code, body)
		}
		if after := k.configMap(t, "default", "app"); after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(after.Data, before.Data) {
			t.Errorf("after the failing json patch: rv %s data %v; want unchanged (rv %s data %v)", after.ResourceVersion, after.Data, before.ResourceVersion, before.Data)
		}
	})

	step("7-label-annotate", func(t *testing.T) {
		if out := k.run(t, "label", "configmap", "app", "tier=web"); out != "configmap/app labeled\n" {
			t.Errorf("kubectl label printed %q; want %q", out, "configmap/app labeled\n")
		}
		if cm := k.configMap(t, "default", "app"); cm.Labels["tier"] != "web" {
			t.Errorf("after kubectl label: labels = %v; want tier=web", cm.Labels)
		}
		if out := k.run(t, "annotate", "configmap", "app", "note=hi"); out != "configmap/app annotated\n" {
			t.Errorf("kubectl annotate printed %q; want %q", out, "configmap/app annotated\n")
		}
		if cm := k.configMap(t, "default", "app"); cm.Annotations["note"] != "hi" {
			t.Errorf("after kubectl annotate: annotations = %v; want note=hi", cm.Annotations)
		}
		// A label selector finds it, too.
		if names := k.run(t, "get", "configmaps", "-l", "tier=web", "-o", "jsonpath={.items[*].metadata.name}"); names != "app" {
			t.Errorf("kubectl get configmaps -l tier=web names %q; want app", names)
		}
		if out := k.run(t, "label", "configmap", "app", "tier-"); out != "configmap/app unlabeled\n" {
			t.Errorf("kubectl label tier- printed %q; want %q", out, "configmap/app unlabeled\n")
		}
		cm := k.configMap(t, "default", "app")
		if _, ok := cm.Labels["tier"]; ok {
			t.Errorf("after kubectl label tier-: labels = %v; want no tier", cm.Labels)
		}
		if cm.Annotations["note"] != "hi" {
			t.Errorf("after kubectl label tier-: annotations = %v; want note=hi kept", cm.Annotations)
		}
	})

	step("8-watch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), kubectlWatchTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectlPath, "--kubeconfig", k.srv.kubeconfig, "--cache-dir", k.cacheDir,
			"get", "configmap", "app", "-w")
		var out, errOut syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatalf("start kubectl get configmap app -w: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		defer func() {
			cancel() // kills kubectl
			select {
			case <-exited:
			case <-time.After(killTimeout):
				t.Errorf("kubectl get -w still running %s after it was killed", killTimeout)
			}
		}()

		waitLines := func(n int, wait time.Duration) bool {
			t.Helper()
			deadline := time.Now().Add(wait)
			for time.Now().Before(deadline) {
				if len(linesNamed(out.String(), "app")) >= n {
					return true
				}
				select {
				case err := <-exited:
					t.Fatalf("kubectl get configmap app -w exited early: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
				case <-time.After(kubectlPoll):
				}
			}
			return false
		}
		if !waitLines(1, kubectlWatchWait) {
			t.Fatalf("kubectl get configmap app -w printed no line for app within %s\nstdout: %s\nstderr: %s", kubectlWatchWait, out.String(), errOut.String())
		}
		// kubectl watches a single object from resourceVersion 0 and skips
		// the first event (the state it already printed), so a change
		// between its GET and its watch would not show: change the
		// ConfigMap until a second line appears (always data.watched, so
		// that DATA stays 3).
		deadline := time.Now().Add(kubectlWatchWait)
		for i := 1; ; i++ {
			k.run(t, "patch", "configmap", "app", "-p", fmt.Sprintf(`{"data":{"watched":"%d"}}`, i))
			if waitLines(2, 3*time.Second) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubectl get configmap app -w: no second line for app within %s of %d patches\nstdout: %s\nstderr: %s", kubectlWatchWait, i, out.String(), errOut.String())
			}
		}
		// As against kube-apiserver, the watch events are Table rows in the
		// columns of the first answer: one header, every row NAME DATA AGE.
		got := out.String()
		if headers := linesNamed(got, "NAME"); len(headers) != 1 || !reflect.DeepEqual(strings.Fields(headers[0]), []string{"NAME", "DATA", "AGE"}) {
			t.Errorf("kubectl get configmap app -w: header lines %q; want exactly one, NAME DATA AGE (watch events served as Table rows)\n%s", headers, got)
		}
		rows := linesNamed(got, "app")
		if f := strings.Fields(rows[len(rows)-1]); len(f) != 3 || f[1] != "3" {
			t.Errorf("kubectl get configmap app -w: row after the patch = %q; want app, DATA 3, AGE\n%s", rows[len(rows)-1], got)
		}
	})

	step("9-delete", func(t *testing.T) {
		if out := k.run(t, "delete", "configmap", "applied"); out != "configmap \"applied\" deleted\n" {
			t.Errorf("kubectl delete configmap applied printed %q; want %q", out, "configmap \"applied\" deleted\n")
		}
		k.waitGone(t, "configmap applied after kubectl delete", "/api/v1/namespaces/default/configmaps/applied")
		if out := k.fail(t, "get", "configmap", "applied"); !strings.Contains(out, `configmaps "applied" not found`) {
			t.Errorf("kubectl get configmap applied after delete: %q; want NotFound", out)
		}

		for _, name := range []string{"c1", "c2", "c3"} {
			k.run(t, "-n", "team", "create", "configmap", name, "--from-literal=k=v")
		}
		if names := k.run(t, "-n", "team", "get", "configmaps", "-o", "jsonpath={.items[*].metadata.name}"); names != "c1 c2 c3" {
			t.Fatalf("configmaps in team before delete --all: %q; want c1 c2 c3", names)
		}
		out := k.run(t, "-n", "team", "delete", "configmap", "--all")
		for _, name := range []string{"c1", "c2", "c3"} {
			if !strings.Contains(out, `configmap "`+name+`" deleted`) {
				t.Errorf("kubectl -n team delete configmap --all printed %q; want %s deleted", out, name)
			}
		}
		k.waitEmptyList(t, "configmaps in team after delete --all", "/api/v1/namespaces/team/configmaps")
		// The default namespace is not touched.
		if code, body := k.httpCode(t, "/api/v1/namespaces/default/configmaps/app"); code != http.StatusOK {
			t.Errorf("configmap default/app after deleting team's: code %d; want 200; body: %s", code, body)
		}

		k.run(t, "-n", "team", "create", "configmap", "c4", "--from-literal=k=v")
		k.run(t, "-n", "team", "create", "secret", "generic", "s", "--from-literal=k=v")
		if out := k.run(t, "delete", "namespace", "team"); out != "namespace \"team\" deleted\n" {
			t.Errorf("kubectl delete namespace team printed %q; want %q", out, "namespace \"team\" deleted\n")
		}
		k.waitGone(t, "namespace team after kubectl delete", "/api/v1/namespaces/team")
		k.waitEmptyList(t, "configmaps of the deleted namespace team", "/api/v1/namespaces/team/configmaps")
		k.waitEmptyList(t, "secrets of the deleted namespace team", "/api/v1/namespaces/team/secrets")
		if out := k.fail(t, "get", "namespace", "team"); !strings.Contains(out, `namespaces "team" not found`) {
			t.Errorf("kubectl get namespace team after delete: %q; want NotFound", out)
		}

		// An object whose finalizer stays keeps its namespace Terminating
		// (the rest of the content gone) until the finalizer is removed.
		k.run(t, "create", "namespace", "held")
		k.run(t, "-n", "held", "create", "configmap", "free", "--from-literal=k=v")
		k.run(t, "-n", "held", "create", "configmap", "held", "--from-literal=k=v")
		k.run(t, "-n", "held", "patch", "configmap", "held", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`)
		if out := k.run(t, "delete", "namespace", "held", "--wait=false"); out != "namespace \"held\" deleted\n" {
			t.Errorf("kubectl delete namespace held --wait=false printed %q", out)
		}
		k.waitGone(t, "configmap free of the terminating namespace held", "/api/v1/namespaces/held/configmaps/free")
		if phase := k.run(t, "get", "namespace", "held", "-o", "jsonpath={.status.phase}"); phase != "Terminating" {
			t.Errorf("namespace held while a finalizer holds its content: phase %q; want Terminating", phase)
		}
		if out := k.fail(t, "-n", "held", "create", "configmap", "late"); !strings.Contains(out, "because it is being terminated") {
			t.Errorf("kubectl create in the terminating namespace held: %q; want Forbidden", out)
		}
		k.run(t, "-n", "held", "patch", "configmap", "held", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		k.run(t, "wait", "--for=delete", "namespace/held", "--timeout=20s")
	})

	step("9b-cascade", func(t *testing.T) {
		// kubectl delete --cascade=background|foreground|orphan, as against
		// kube: the garbage collector deletes (or orphans) the dependents.
		dependent := func(name, owner, uid string) {
			manifest := k.writeFile(t, name+".yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: `+name+`
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: `+owner+`, uid: `+uid+`, blockOwnerDeletion: true}
`, 0o644)
			k.run(t, "create", "-f", manifest)
		}
		for _, cascade := range []string{"background", "foreground", "orphan"} {
			owner := "owner-" + cascade
			k.run(t, "create", "configmap", owner)
			uid := k.run(t, "get", "configmap", owner, "-o", "jsonpath={.metadata.uid}")
			dependent("dep-"+cascade, owner, uid)
			if out := k.run(t, "delete", "configmap", owner, "--cascade="+cascade); out != "configmap \""+owner+"\" deleted\n" {
				t.Errorf("kubectl delete --cascade=%s printed %q", cascade, out)
			}
			k.waitGone(t, "owner after --cascade="+cascade, "/api/v1/namespaces/default/configmaps/"+owner)
			if cascade != "orphan" {
				k.waitGone(t, "dependent after --cascade="+cascade, "/api/v1/namespaces/default/configmaps/dep-"+cascade)
				continue
			}
			dep := k.configMap(t, "default", "dep-orphan")
			if len(dep.OwnerReferences) != 0 || dep.DeletionTimestamp != nil {
				t.Errorf("dependent after --cascade=orphan: ownerReferences %v, deletionTimestamp %v; want none, kept", dep.OwnerReferences, dep.DeletionTimestamp)
			}
		}
	})

	step("10-strict-validation", func(t *testing.T) {
		manifest := k.writeFile(t, "unknown-field.yaml", unknownFieldManifest, 0o644)
		out := k.fail(t, "create", "-f", manifest)
		if !strings.Contains(out, `unknown field "spec"`) {
			t.Errorf("kubectl create -f (manifest with spec.x) output %q; want it to name the unknown field \"spec\"", out)
		}
		if code, body := k.httpCode(t, "/api/v1/namespaces/default/configmaps/strict"); code != http.StatusNotFound {
			t.Errorf("GET configmap strict after the rejected create: code %d; want 404; body: %s", code, body)
		}
	})

	srv.stopCleanly(t)
}

// requestPatch sends a PATCH with the given content type and body.
func requestPatch(ctx context.Context, url, contentType, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPatch, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return resp.StatusCode, nil, err
	}
	return resp.StatusCode, b.Bytes(), nil
}
