// Package e2e runs the real concord binary, as an operator would: built
// once, started with flags, talked to over loopback HTTP and with kubectl,
// and stopped with SIGTERM.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds on every wait, so that a hung server fails the test instead of
// hanging it.
const (
	readyTimeout   = 60 * time.Second
	exitTimeout    = 30 * time.Second
	killTimeout    = 10 * time.Second
	requestTimeout = 10 * time.Second
)

// concordBin is the binary built once by TestMain.
var concordBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "concord-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir for the binary: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	concordBin = filepath.Join(dir, "concord")
	build := exec.Command("go", "build", "-o", concordBin, "github.com/concord-dev/concord/cmd/concord")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build of cmd/concord failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// proc is one running concord process and everything it logged.
type proc struct {
	name string
	dir  string
	cmd  *exec.Cmd

	readyc chan readyLine // the "concord ready" line, once
	done   chan struct{}  // closed once the process has exited and its log is read

	mu    sync.Mutex
	lines []string

	// Set by startConcord from the ready line.
	url        string
	kubeconfig string
}

// readyLine holds the fields of the JSON "concord ready" log line.
type readyLine struct {
	Msg        string `json:"msg"`
	URL        string `json:"url"`
	Kubeconfig string `json:"kubeconfig"`
}

// openServingFlags make the binary serve plain HTTP to anyone, as the
// tests that are not about security talk to it: --insecure-serving (HTTP
// on loopback), --anonymous-auth (no credentials needed) and
// --authorization-mode AlwaysAllow. Authentication and authorization still
// run; e2e/auth_test.go overrides these flags to test them.
var openServingFlags = []string{"--insecure-serving", "--anonymous-auth", "--authorization-mode", "AlwaysAllow"}

// launch starts the concord binary in dir with --port 0 --log-format json
// and openServingFlags, followed by args (a later flag wins, so args may
// override them). It does not wait for readiness.
func launch(t testing.TB, name, dir string, args ...string) *proc {
	t.Helper()
	args = append(append([]string{"--port", "0", "--log-format", "json"}, openServingFlags...), args...)
	return startProc(t, name, dir, concordBin, args...)
}

// startProc starts bin with args in dir. It does not wait for anything.
// The process is killed at the end of the test if it still runs, and the
// end of its log is printed if the test failed.
func startProc(t testing.TB, name, dir, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{
		name:   name,
		dir:    dir,
		cmd:    exec.Command(bin, args...),
		readyc: make(chan readyLine, 1),
		done:   make(chan struct{}),
	}
	p.cmd.Dir = dir
	p.cmd.Stdout = logWriter{p}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatalf("%s: stderr pipe: %v", name, err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: start %s %s: %v", name, bin, strings.Join(args, " "), err)
	}
	go p.readLog(stderr)
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s (pid %d; %s %s) log, last %d lines:\n%s", name, p.cmd.Process.Pid, filepath.Base(bin), strings.Join(args, " "), logTailLines, p.logTail(logTailLines))
		}
	})
	return p
}

// startConcord launches the binary and waits for its ready line.
func startConcord(t testing.TB, name, dir string, args ...string) *proc {
	t.Helper()
	p := launch(t, name, dir, args...)
	r := p.waitReady(t)
	p.url, p.kubeconfig = r.URL, r.Kubeconfig
	return p
}

// readLog keeps every stderr line and reports the ready line; once stderr
// closes it reaps the process.
func (p *proc) readLog(stderr io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.add(line)
		var r readyLine
		if json.Unmarshal([]byte(line), &r) == nil && r.Msg == "concord ready" {
			select {
			case p.readyc <- r:
			default:
			}
		}
	}
	if err := sc.Err(); err != nil {
		p.add(fmt.Sprintf("e2e: reading stderr: %v", err))
		// Keep draining so that the process never blocks on a full pipe.
		if _, err := io.Copy(io.Discard, stderr); err != nil {
			p.add(fmt.Sprintf("e2e: draining stderr: %v", err))
		}
	}
	// The exit code stays in p.cmd.ProcessState; the log says how it ended.
	if err := p.cmd.Wait(); err != nil {
		p.add(fmt.Sprintf("e2e: process ended: %v", err))
	}
}

func (p *proc) add(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, line)
}

// log is everything the process wrote so far, one line each.
func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// logMessages are the "msg" fields of the JSON log lines.
func (p *proc) logMessages() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var msgs []string
	for _, line := range p.lines {
		var l struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg != "" {
			msgs = append(msgs, l.Msg)
		}
	}
	return msgs
}

// errorLine is the line main prints when run fails ("concord: ..."), or
// "" if there is none.
func (p *proc) errorLine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, line := range p.lines {
		if strings.HasPrefix(line, "concord: ") {
			return line
		}
	}
	return ""
}

// logWriter adds what the process writes to stdout to its log.
type logWriter struct{ p *proc }

func (w logWriter) Write(b []byte) (int, error) {
	w.p.add("stdout: " + strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (p *proc) waitReady(t testing.TB) readyLine {
	t.Helper()
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case r := <-p.readyc:
		return r
	case <-p.done:
		select {
		case r := <-p.readyc:
			t.Fatalf("%s: said it was ready, then exited with code %d; log:\n%s", p.name, p.cmd.ProcessState.ExitCode(), p.log())
			return r
		default:
		}
		t.Fatalf("%s: exited with code %d before it was ready; log:\n%s", p.name, p.cmd.ProcessState.ExitCode(), p.log())
	case <-timer.C:
		t.Fatalf("%s: not ready after %s; log:\n%s", p.name, readyTimeout, p.log())
	}
	return readyLine{}
}

// waitExit waits at most timeout for the process to exit and returns its
// exit code (-1 when a signal killed it).
func (p *proc) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s: still running after %s; log:\n%s", p.name, timeout, p.log())
		return 0
	}
}

// terminate sends SIGTERM and returns the exit code.
func (p *proc) terminate(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	return p.waitExit(t, exitTimeout)
}

// stopCleanly sends SIGTERM and fails unless the process exits with code 0
// and logs "stopped".
func (p *proc) stopCleanly(t *testing.T) {
	t.Helper()
	if code := p.terminate(t); code != 0 {
		t.Errorf("%s: exit code after SIGTERM = %d; want 0", p.name, code)
	}
	if msgs := p.logMessages(); !contains(msgs, "stopped") {
		t.Errorf("%s: log messages after SIGTERM = %q; want one to be \"stopped\"", p.name, msgs)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// requireEmptyDir fails if dir has any entry.
func requireEmptyDir(t *testing.T, what, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) > 0 {
		t.Errorf("%s %s holds %q; want it empty", what, dir, names)
	}
}

var httpClient = &http.Client{Timeout: requestTimeout}

// request sends body (if not nil) as JSON and returns the status code and
// the response body. It never calls t.Fatal, so goroutines may use it.
func request(ctx context.Context, method, url string, body any) (int, []byte, error) {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("encode %s %s body: %w", method, url, err)
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return resp.StatusCode, respBody, nil
}

// do is request for the test goroutine: it fails the test on transport
// errors.
func do(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	code, respBody, err := request(t.Context(), method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return code, respBody
}

// doConfigMap sends the request and decodes the ConfigMap answered with
// wantCode.
func doConfigMap(t *testing.T, method, url string, body any, wantCode int) *corev1.ConfigMap {
	t.Helper()
	code, respBody := do(t, method, url, body)
	if code != wantCode {
		t.Fatalf("%s %s: code %d; want %d; body: %s", method, url, code, wantCode, respBody)
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(respBody, &cm); err != nil {
		t.Fatalf("%s %s: decode ConfigMap: %v; body: %s", method, url, err, respBody)
	}
	return &cm
}

func decodeStatus(body []byte) (*metav1.Status, error) {
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode Status: %w; body: %s", err, body)
	}
	return &st, nil
}

// configMapURL is the item path of a ConfigMap in namespace default.
func configMapURL(base, name string) string {
	return base + "/api/v1/namespaces/default/configmaps/" + name
}

func configMapsURL(base string) string {
	return base + "/api/v1/namespaces/default/configmaps"
}

func newConfigMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       data,
	}
}
