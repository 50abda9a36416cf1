package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// helmModule is the Helm 3 CLI the test builds from its Go module (Helm
// rewrites its release records with PUTs that carry no resourceVersion:
// issue 13).
const helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"

// Bounds of the Helm test.
const (
	helmBuildTimeout   = 8 * time.Minute // go install, modules not yet in the module cache
	helmCommandTimeout = time.Minute     // one helm command
)

// helmBuild is the helm binary, built once per test binary.
var helmBuild struct {
	once sync.Once
	path string
	took time.Duration
	err  error
}

// buildHelm builds the helm CLI with go install from its module, at the
// version in helmModule, into the directory TestMain removes at the end
// (next to the concord binary). The modules come from the module cache or
// the Go module proxy; nothing else is downloaded (GOTOOLCHAIN=local). A
// failed build fails the test with go's output.
func buildHelm(t *testing.T) string {
	t.Helper()
	helmBuild.once.Do(func() {
		dir := filepath.Dir(concordBin)
		ctx, cancel := context.WithTimeout(context.Background(), helmBuildTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "install", helmModule)
		cmd.Dir = dir // outside this module: a module-aware install of Helm's own go.mod
		cmd.Env = append(os.Environ(),
			"GOBIN="+filepath.Join(dir, "helm-bin"),
			"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"),
			"GOTOOLCHAIN=local")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		helmBuild.took = time.Since(start)
		if err != nil {
			helmBuild.err = fmt.Errorf("go install %s (%s): %w\n%s", helmModule, helmBuild.took.Round(time.Millisecond), err, out)
			return
		}
		helmBuild.path = filepath.Join(dir, "helm-bin", "helm")
	})
	if helmBuild.err != nil {
		t.Fatalf("build helm: %v", helmBuild.err)
	}
	t.Logf("helm built by go install %s in %s", helmModule, helmBuild.took.Round(time.Millisecond))
	return helmBuild.path
}

// helmSession is the helm CLI with one storage driver, against one server
// through the kubeconfig the server wrote, with its own home.
type helmSession struct {
	bin, driver string
	srv         *proc
	home        string
	kubectlDir  string // kubectl's cache, for reading objects
}

func newHelmSession(t *testing.T, bin, driver string, srv *proc) *helmSession {
	t.Helper()
	home := t.TempDir()
	return &helmSession{bin: bin, driver: driver, srv: srv, home: home, kubectlDir: filepath.Join(home, "kubectl-cache")}
}

// exec runs helm with args for at most helmCommandTimeout; code is its exit
// code.
func (h *helmSession) exec(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), helmCommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, append(args, "--kubeconfig", h.srv.kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_DRIVER="+h.driver,
		"HOME="+h.home,
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		code = exit.ExitCode()
	default:
		t.Fatalf("HELM_DRIVER=%s helm %s: %v (context: %v)\nstdout: %s\nstderr: %s", h.driver, strings.Join(args, " "), err, ctx.Err(), out.String(), errOut.String())
	}
	return out.String(), errOut.String(), code
}

// run runs helm and fails the test unless it exits 0; it returns stdout.
func (h *helmSession) run(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := h.exec(t, args...)
	if code != 0 {
		t.Fatalf("HELM_DRIVER=%s helm %s: exit code %d; want 0\nstdout: %s\nstderr: %s", h.driver, strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// helmRelease is what the test checks of one line of helm list -o json.
type helmRelease struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Revision  string `json:"revision"`
	Status    string `json:"status"`
	Chart     string `json:"chart"`
}

func (h *helmSession) list(t *testing.T, args ...string) []helmRelease {
	t.Helper()
	out := h.run(t, append([]string{"list", "-o", "json"}, args...)...)
	var releases []helmRelease
	if err := json.Unmarshal([]byte(out), &releases); err != nil {
		t.Fatalf("helm list %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
	return releases
}

// helmRevision is what the test checks of one line of helm history -o json.
type helmRevision struct {
	Revision    int    `json:"revision"`
	Status      string `json:"status"`
	Description string `json:"description"`
}

func (h *helmSession) history(t *testing.T, release string) []helmRevision {
	t.Helper()
	out := h.run(t, "history", release, "-o", "json")
	var revs []helmRevision
	if err := json.Unmarshal([]byte(out), &revs); err != nil {
		t.Fatalf("helm history %s -o json: %v\n%s", release, err, out)
	}
	return revs
}

// kubectl runs kubectl against the session's server and returns stdout.
func (h *helmSession) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := kubectl(t, h.srv.kubeconfig, h.kubectlDir, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// greeting is the value the chart rendered into the release's ConfigMap
// (<release>-config in namespace); "" and false when it does not exist.
func (h *helmSession) greeting(t *testing.T, namespace, release string) (string, bool) {
	t.Helper()
	out := h.kubectl(t, "-n", namespace, "get", "configmap", release+"-config", "--ignore-not-found", "-o", "json")
	if out == "" {
		return "", false
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatalf("kubectl get configmap -o json: %v\n%s", err, out)
	}
	return cm.Data["greeting"], true
}

// records are the release's records as stored by the session's driver
// (Secrets or ConfigMaps labelled owner=helm), name → their status label.
func (h *helmSession) records(t *testing.T, namespace, release string) map[string]string {
	t.Helper()
	kind := h.driver + "s"
	out := h.kubectl(t, "-n", namespace, "get", kind, "-l", "owner=helm,name="+release, "-o", "json")
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Type string `json:"type"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl get %s -o json: %v\n%s", kind, err, out)
	}
	got := map[string]string{}
	for _, item := range list.Items {
		got[item.Metadata.Name] = item.Metadata.Labels["status"]
		if h.driver == "secret" && item.Type != "helm.sh/release.v1" {
			t.Errorf("release record %s has type %q; want helm.sh/release.v1", item.Metadata.Name, item.Type)
		}
	}
	return got
}

// unconditionalUpdates reads concord_unconditional_updates_total of the
// core resource from the server's /metrics.
func unconditionalUpdates(t *testing.T, srv *proc, caFile, resource string) float64 {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("CA: %v", err)
	}
	resp, err := caClient(t, caPEM).Get(srv.url + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	series := `concord_unconditional_updates_total{group="",resource="` + resource + `"} `
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s%q: %v", series, v, err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	t.Fatalf("/metrics has no series %s", series)
	return 0
}

// writeChart writes a chart of one ConfigMap, <release>-config, whose
// greeting is the value greeting (default hello), and returns its path.
func writeChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	if err := os.MkdirAll(filepath.Join(dir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "Chart.yaml"), "apiVersion: v2\nname: demo\nversion: 0.1.0\nappVersion: \"1.0\"\n")
	writeFile(t, filepath.Join(dir, "values.yaml"), "greeting: hello\n")
	writeFile(t, filepath.Join(dir, "templates", "configmap.yaml"), `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: {{ .Values.greeting | quote }}
`)
	return dir
}

// startHelmServer starts the dev-mode binary with its secure defaults
// (HTTPS with its own CA, the admin client certificate in the kubeconfig
// it writes), with args; it returns the server and its CA file.
func startHelmServer(t *testing.T, name string, args ...string) (*proc, string) {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "data")
	args = append(append(append([]string{}, secureFlags...), "--data-dir", dataDir), args...)
	srv := startConcord(t, name, t.TempDir(), args...)
	if !strings.HasPrefix(srv.url, "https://") || srv.kubeconfig == "" {
		t.Fatalf("ready line url %q, kubeconfig %q; want https and a kubeconfig", srv.url, srv.kubeconfig)
	}
	return srv, filepath.Join(dataDir, "tls", "ca.crt")
}

// TestHelmManagesReleases drives the real Helm 3 CLI, with each of its
// storage drivers, through a release's life against the binary with its
// default --unconditional-update=helm-releases, and checks the exit codes,
// what helm list and helm history say, the ConfigMap the chart renders and
// the release records Helm stores (issue 13).
func TestHelmManagesReleases(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Fatalf("this test reads objects with the real kubectl: %v", err)
	}
	helm := buildHelm(t)
	chart := writeChart(t)
	for _, driver := range []string{"secret", "configmap"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			srv, caFile := startHelmServer(t, "concord (helm, "+driver+" driver)")
			h := newHelmSession(t, helm, driver, srv)
			record := func(rev int) string { return "sh.helm.release.v1.demo.v" + strconv.Itoa(rev) }
			check := func(t *testing.T, what string, got, want any) {
				t.Helper()
				if diff := cmp.Diff(got, want); diff != "" {
					t.Errorf("%s (-got +want):\n%s", what, diff)
				}
			}
			checkGreeting := func(t *testing.T, namespace, release, want string) {
				t.Helper()
				if got, ok := h.greeting(t, namespace, release); !ok || got != want {
					t.Errorf("ConfigMap %s/%s-config: greeting %q (exists: %t); want %q", namespace, release, got, ok, want)
				}
			}
			release := func(name, namespace, rev, status string) helmRelease {
				return helmRelease{Name: name, Namespace: namespace, Revision: rev, Status: status, Chart: "demo-0.1.0"}
			}
			// Each step needs the ones before it.
			steps := []struct {
				name string
				f    func(t *testing.T)
			}{
				{"install", func(t *testing.T) {
					if out := h.run(t, "install", "demo", chart); !strings.Contains(out, "STATUS: deployed") {
						t.Errorf("helm install printed %q; want STATUS: deployed", out)
					}
					check(t, "helm list", h.list(t), []helmRelease{release("demo", "default", "1", "deployed")})
					checkGreeting(t, "default", "demo", "hello")
					check(t, "release records", h.records(t, "default", "demo"), map[string]string{record(1): "deployed"})
				}},
				{"upgrade --set", func(t *testing.T) {
					h.run(t, "upgrade", "demo", chart, "--set", "greeting=bonjour")
					check(t, "helm list", h.list(t), []helmRelease{release("demo", "default", "2", "deployed")})
					checkGreeting(t, "default", "demo", "bonjour")
					check(t, "release records", h.records(t, "default", "demo"), map[string]string{record(1): "superseded", record(2): "deployed"})
				}},
				{"history", func(t *testing.T) {
					check(t, "helm history", h.history(t, "demo"), []helmRevision{
						{1, "superseded", "Install complete"},
						{2, "deployed", "Upgrade complete"},
					})
				}},
				{"rollback", func(t *testing.T) {
					h.run(t, "rollback", "demo", "1")
					check(t, "helm list", h.list(t), []helmRelease{release("demo", "default", "3", "deployed")})
					checkGreeting(t, "default", "demo", "hello")
					check(t, "helm history", h.history(t, "demo"), []helmRevision{
						{1, "superseded", "Install complete"},
						{2, "superseded", "Upgrade complete"},
						{3, "deployed", "Rollback to 1"},
					})
				}},
				{"upgrade --install --create-namespace", func(t *testing.T) {
					h.run(t, "upgrade", "--install", "other", chart, "-n", "apps", "--create-namespace", "--set", "greeting=hi")
					if out := h.kubectl(t, "get", "namespace", "apps", "-o", "jsonpath={.status.phase}"); out != "Active" {
						t.Errorf("namespace apps: phase %q; want Active", out)
					}
					check(t, "helm list -n apps", h.list(t, "-n", "apps"), []helmRelease{release("other", "apps", "1", "deployed")})
					checkGreeting(t, "apps", "other", "hi")
				}},
				{"uninstall", func(t *testing.T) {
					if out := h.run(t, "uninstall", "other", "-n", "apps"); out != "release \"other\" uninstalled\n" {
						t.Errorf("helm uninstall printed %q", out)
					}
					check(t, "helm list -n apps --all", h.list(t, "-n", "apps", "--all"), []helmRelease{})
					if got, ok := h.greeting(t, "apps", "other"); ok {
						t.Errorf("ConfigMap apps/other-config still exists (greeting %q)", got)
					}
					check(t, "release records in apps", h.records(t, "apps", "other"), map[string]string{})
				}},
				{"uninstall --keep-history", func(t *testing.T) {
					h.run(t, "uninstall", "demo", "--keep-history")
					check(t, "helm list", h.list(t), []helmRelease{})
					check(t, "helm list --uninstalled", h.list(t, "--uninstalled"), []helmRelease{release("demo", "default", "3", "uninstalled")})
					if got, ok := h.greeting(t, "default", "demo"); ok {
						t.Errorf("ConfigMap default/demo-config still exists (greeting %q)", got)
					}
					check(t, "release records", h.records(t, "default", "demo"),
						map[string]string{record(1): "superseded", record(2): "superseded", record(3): "uninstalled"})
				}},
			}
			for _, s := range steps {
				if !t.Run(s.name, s.f) {
					t.Fatalf("step %q failed; the later steps depend on it", s.name)
				}
			}

			// Helm rewrote its records with PUTs without a version: install
			// 1 (deployed), upgrade 2 (superseded, deployed), rollback 2,
			// upgrade --install 1, uninstall 1 (uninstalling), uninstall
			// --keep-history 2 (uninstalling, uninstalled).
			other := map[string]string{"secret": "configmaps", "configmap": "secrets"}[driver]
			if got := unconditionalUpdates(t, srv, caFile, driver+"s"); got != 9 {
				t.Errorf("concord_unconditional_updates_total{resource=%q} = %v; want 9", driver+"s", got)
			}
			if got := unconditionalUpdates(t, srv, caFile, other); got != 0 {
				t.Errorf("concord_unconditional_updates_total{resource=%q} = %v; want 0 (the chart's ConfigMap is patched)", other, got)
			}
		})
	}
}

// TestHelmWithUnconditionalUpdateNone: --unconditional-update=none is the
// strict rule, and Helm fails as it did before issue 13: helm install
// exits 0 and prints STATUS: deployed, but the record stays pending-install
// (helm --debug shows the 428, which names the flag to change), so the
// next upgrade fails.
func TestHelmWithUnconditionalUpdateNone(t *testing.T) {
	t.Parallel()
	helm := buildHelm(t)
	chart := writeChart(t)
	srv, caFile := startHelmServer(t, "concord (--unconditional-update=none)", "--unconditional-update=none")
	for _, driver := range []string{"secret", "configmap"} {
		t.Run(driver, func(t *testing.T) {
			h := newHelmSession(t, helm, driver, srv)
			name := "refused-" + driver
			out, errOut, code := h.exec(t, "install", name, chart, "--debug")
			if code != 0 || !strings.Contains(out, "STATUS: deployed") {
				t.Errorf("helm install --debug: exit code %d, stdout %q; want 0 and STATUS: deployed (Helm hides the failure)", code, out)
			}
			// Each driver logs it in its own words, then the Status message.
			want := fmt.Sprintf(`failed to update: %ss "sh.helm.release.v1.%s.v1": an update must say which version it replaces: send metadata.resourceVersion from the object you read, or an If-Match header with its ETag (Helm sends neither for its release records: start the server with --unconditional-update=helm-releases to accept them)`, driver, name)
			if !strings.Contains(errOut, want) {
				t.Errorf("helm install --debug stderr:\n%s\nwant it to contain %q", errOut, want)
			}
			if diff := cmp.Diff(h.list(t, "--all"), []helmRelease{{Name: name, Namespace: "default", Revision: "1", Status: "pending-install", Chart: "demo-0.1.0"}}); diff != "" {
				t.Errorf("helm list --all (-got +want):\n%s", diff)
			}
			out, errOut, code = h.exec(t, "upgrade", name, chart)
			if code != 1 || !strings.Contains(errOut, "another operation (install/upgrade/rollback) is in progress") {
				t.Errorf("helm upgrade after it: exit code %d, stdout %q, stderr %q; want 1 and another operation in progress", code, out, errOut)
			}
			if got := unconditionalUpdates(t, srv, caFile, driver+"s"); got != 0 {
				t.Errorf("concord_unconditional_updates_total{resource=%q} = %v; want 0", driver+"s", got)
			}
		})
	}
}
