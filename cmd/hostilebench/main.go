// Command hostilebench measures how one Concord replica holds up under
// hostile clients (issue 26, N3): it starts the binary (dev mode: an
// embedded etcd, HTTP on loopback), has --clients clients send one kind of
// hostile request in a loop for --duration, and meanwhile probes /readyz
// every second and samples the replica's memory. It reports, per binary
// and kind, the answers by status code (and the requests that got none),
// the replica's peak resident memory (VmHWM, which the kernel keeps) and
// the /readyz probes that failed.
//
// The kinds: selector, a list whose labelSelector is --selector-bytes
// long (880 KB: within the 1 MiB of headers); body, a POST of a ConfigMap
// of --body-bytes (1 MiB of data: 422 over the data limit).
//
//	go build -o /tmp/new/concord ./cmd/concord
//	go run ./cmd/hostilebench --bin new=/tmp/new/concord --clients 200 --duration 30s
//
// Several --bin measure several builds (old=…, new=…) one after the other,
// each kind against a fresh replica.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// binaries are the --bin flags: name=path, in order.
type binaries [][2]string

func (b *binaries) String() string { return fmt.Sprint(*b) }

func (b *binaries) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("%q: want name=path", v)
	}
	*b = append(*b, [2]string{name, path})
	return nil
}

type config struct {
	bins          binaries
	kinds         []string
	clients       int
	duration      time.Duration
	selectorBytes int
	bodyBytes     int
	timeout       time.Duration
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("hostilebench", flag.ExitOnError)
	fs.Var(&cfg.bins, "bin", "name=path of a concord binary to measure (repeat to compare builds)")
	kinds := fs.String("kinds", "selector,body", "hostile requests to send: selector, body")
	fs.IntVar(&cfg.clients, "clients", 200, "concurrent hostile clients")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "how long the clients send, per binary and kind")
	fs.IntVar(&cfg.selectorBytes, "selector-bytes", 880_000, "length of the labelSelector of the selector kind")
	fs.IntVar(&cfg.bodyBytes, "body-bytes", 1<<20, "bytes of data in the ConfigMap of the body kind")
	fs.DurationVar(&cfg.timeout, "request-timeout", 30*time.Second, "how long a client waits for an answer before it counts none")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg.kinds = strings.Split(*kinds, ",")
	if len(cfg.bins) == 0 || cfg.clients <= 0 || cfg.duration <= 0 {
		fmt.Fprintln(os.Stderr, "hostilebench: give at least one --bin name=path, --clients > 0 and --duration > 0")
		os.Exit(2)
	}
	for _, k := range cfg.kinds {
		if k != "selector" && k != "body" {
			fmt.Fprintf(os.Stderr, "hostilebench: --kinds: %q is neither selector nor body\n", k)
			os.Exit(2)
		}
	}
	fmt.Printf("%d clients for %s each; readyz probed every 1s (2s timeout)\n\n", cfg.clients, cfg.duration)
	fmt.Printf("%-8s %-9s %9s %10s %11s %9s  %s\n", "binary", "kind", "requests", "no answer", "peak RSS", "readyz", "answers")
	for _, bin := range cfg.bins {
		for _, kind := range cfg.kinds {
			res, err := measure(context.Background(), cfg, bin[1], kind)
			if err != nil {
				fmt.Fprintf(os.Stderr, "hostilebench: %s %s: %v\n", bin[0], kind, err)
				os.Exit(1)
			}
			failed, why := res.readyzFailures()
			fmt.Printf("%-8s %-9s %9d %10d %7d MiB %4d/%-4d  %s", bin[0], kind, res.requests, res.noAnswer,
				res.peakRSS>>20, failed, res.readyzProbes, res.codes())
			if failed > 0 {
				fmt.Printf("  (readyz: %s)", why)
			}
			fmt.Println()
		}
	}
}

// result is what one run measured.
type result struct {
	requests, noAnswer int
	byCode             map[int]int
	peakRSS            int64
	readyzProbes       int
	// readyzFailed counts the failed probes by why: a code, "no answer".
	readyzFailed map[string]int
}

func (r *result) readyzFailures() (n int, why string) {
	var parts []string
	for reason, count := range r.readyzFailed {
		n += count
		parts = append(parts, fmt.Sprintf("%s×%d", reason, count))
	}
	slices.Sort(parts)
	return n, strings.Join(parts, " ")
}

func (r *result) codes() string {
	codes := make([]int, 0, len(r.byCode))
	for c := range r.byCode {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", c, r.byCode[c]))
	}
	return strings.Join(parts, " ")
}

// measure runs one kind of hostile clients against a fresh replica of bin.
func measure(ctx context.Context, cfg config, bin, kind string) (*result, error) {
	rep, err := startReplica(ctx, bin)
	if err != nil {
		return nil, err
	}
	defer rep.stop()
	send := hostileRequest(kind, rep.url, cfg)
	res := &result{byCode: map[int]int{}}
	var mu sync.Mutex
	record := func(code int) {
		mu.Lock()
		defer mu.Unlock()
		res.requests++
		if code == 0 {
			res.noAnswer++
			return
		}
		res.byCode[code]++
	}
	client := &http.Client{Timeout: cfg.timeout, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.clients, DisableCompression: true}}
	deadline := time.Now().Add(cfg.duration)
	var wg sync.WaitGroup
	for range cfg.clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				record(send(client))
			}
		})
	}
	stop := make(chan struct{})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		res.readyzProbes, res.readyzFailed = probeReadyz(rep.url, stop)
	}()
	wg.Wait()
	close(stop)
	<-probed
	res.peakRSS, err = procStatus(rep.cmd.Process.Pid, "VmHWM")
	return res, err
}

// hostileRequest sends one request of kind and returns its status code
// (0: no answer).
func hostileRequest(kind, url string, cfg config) func(*http.Client) int {
	const configMaps = "/api/v1/namespaces/default/configmaps"
	var method, target, body string
	switch kind {
	case "selector":
		var b strings.Builder
		for i := 0; b.Len() < cfg.selectorBytes; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "k%d=v", i)
		}
		method, target = http.MethodGet, url+configMaps+"?labelSelector="+b.String()
	case "body":
		method, target = http.MethodPost, url+configMaps
		body = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"hostile-"},"data":{"a":"` + strings.Repeat("x", cfg.bodyBytes) + `"}}`
	}
	return func(client *http.Client) int {
		req, err := http.NewRequest(method, target, strings.NewReader(body))
		if err != nil {
			return 0
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0
		}
		return resp.StatusCode
	}
}

// probeReadyz asks /readyz every second, as a load balancer would, with
// a 2 s timeout, until stop is closed: how many probes, and why those that
// failed did (their code and failed checks, or no answer).
func probeReadyz(url string, stop <-chan struct{}) (probes int, failed map[string]int) {
	failed = map[string]int{}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return probes, failed
		case <-tick.C:
		}
		probes++
		resp, err := client.Get(url + "/readyz?verbose")
		if err != nil {
			failed["no answer"]++
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failed[strconv.Itoa(resp.StatusCode)+failedChecks(string(body))]++
		}
	}
}

// failedChecks names the checks a /readyz?verbose body says failed
// ("[-]etcd failed: …"), as " (etcd)"; empty when it names none.
func failedChecks(body string) string {
	var names []string
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "[-]"); ok {
			name, _, _ := strings.Cut(rest, " ")
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ",") + ")"
}

// procStatus is a field of /proc/<pid>/status in bytes (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		value, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s: %w", pid, field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// replica is a running concord binary.
type replica struct {
	cmd *exec.Cmd
	dir string
	url string
}

// startReplica starts bin in dev mode (embedded etcd in a fresh data
// directory, HTTP on a free loopback port, open to anonymous requests) and
// waits, at most a minute, for its ready line. Its log is read and
// dropped.
func startReplica(ctx context.Context, bin string) (*replica, error) {
	dir, err := os.MkdirTemp("", "hostilebench-")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--port", "0", "--log-format", "json", "--insecure-serving", "--anonymous-auth",
		"--authorization-mode", "AlwaysAllow", "--data-dir", filepath.Join(dir, "data"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	rep := &replica{cmd: cmd, dir: dir}
	ready := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		lines.Buffer(make([]byte, 64<<10), 4<<20)
		for lines.Scan() {
			var line struct{ Msg, URL string }
			if json.Unmarshal(lines.Bytes(), &line) == nil && line.Msg == "concord ready" {
				ready <- line.URL
			}
		}
	}()
	select {
	case rep.url = <-ready:
		return rep, nil
	case <-time.After(time.Minute):
		rep.stop()
		return nil, errors.New("no 'concord ready' line within a minute")
	}
}

func (r *replica) stop() {
	_ = r.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() {
		_ = r.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(r.dir)
}
