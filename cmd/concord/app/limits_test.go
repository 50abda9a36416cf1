package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowClient connects to host, sends head, then one more byte every
// 100 ms until the server hangs up (or 15 s pass). It returns how long the
// server let it hold the connection and the status line it got, if any.
func slowClient(host, head string) (took time.Duration, status string, err error) {
	start := time.Now()
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(start.Add(15 * time.Second)); err != nil {
		return 0, "", err
	}
	if _, err := io.WriteString(conn, head); err != nil {
		return 0, "", err
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	line, _ := bufio.NewReader(conn).ReadString('\n')
	_, err = io.Copy(io.Discard, conn) // until the server closes
	return time.Since(start), strings.TrimSpace(line), err
}

// TestSlowClientsCannotHoldTheServer: 200 clients connect at once, half
// sending their headers a byte at a time, half sending a POST's headers and
// then its body a byte at a time. The server cuts the first after
// ReadHeaderTimeout and answers the others 408 at --request-timeout, keeps
// serving a normal client quickly meanwhile, does not crash, and its
// goroutines return to about what they were.
func TestSlowClientsCannotHoldTheServer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Port = 0
	cfg.ReadHeaderTimeout = time.Second
	cfg.RequestTimeout = 2 * time.Second
	openServing(&cfg)
	base, _, done := startRun(t, cfg, io.Discard)
	host := strings.TrimPrefix(base, "http://")

	normal := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer normal.CloseIdleConnections()
	serial := 0
	// request sends one normal request and returns its latency.
	request := func() time.Duration {
		t.Helper()
		start := time.Now()
		serial++
		body := fmt.Sprintf(`{"metadata":{"name":"normal-%d"}}`, serial)
		resp, err := normal.Post(base+"/api/v1/namespaces/default/configmaps", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatalf("normal POST: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("normal POST = %d; want 201", resp.StatusCode)
		}
		resp, err = normal.Get(base + "/api/v1/namespaces/default/configmaps?limit=50")
		if err != nil {
			t.Fatalf("normal GET: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("normal GET = %d; want 200", resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 5 {
		request()
	}
	// The controllers start beside the API (the ServiceAccounts
	// controller's watches and read caches): counted once they run, when
	// the default namespace has its ServiceAccount.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := normal.Get(base + "/api/v1/namespaces/default/serviceaccounts/default")
		if err != nil {
			t.Fatalf("GET the default ServiceAccount: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default ServiceAccount of default: %d after 20s", resp.StatusCode)
		}
	}
	normal.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	baseline := runtime.NumGoroutine()

	const attackers = 200
	type outcome struct {
		slowBody bool
		took     time.Duration
		status   string
		err      error
	}
	results := make(chan outcome, attackers)
	var wg sync.WaitGroup
	for i := range attackers {
		slowBody := i%2 == 1
		head := "GET /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: concord\r\nX-Slow: "
		if slowBody {
			head = fmt.Sprintf("POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: concord\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"metadata\":{\"name\":\"slow-%d\"},\"data\":{\"a\":\"", i)
		}
		wg.Go(func() {
			took, status, err := slowClient(host, head)
			results <- outcome{slowBody, took, status, err}
		})
	}
	attackDone := make(chan struct{})
	go func() { wg.Wait(); close(attackDone) }()

	var worst time.Duration
	served := 0
	for attacking := true; attacking; {
		select {
		case <-attackDone:
			attacking = false
		case <-time.After(100 * time.Millisecond):
			worst = max(worst, request())
			served++
		}
	}
	close(results)
	t.Logf("a normal client was served %d times during the attack, the slowest in %s", served, worst)
	if worst > 2*time.Second {
		t.Errorf("a normal client waited %s during the attack; want under 2s", worst)
	}
	if served < 5 {
		t.Errorf("a normal client was served only %d times during the attack", served)
	}

	var slowest [2]time.Duration
	for r := range results {
		kind := map[bool]string{false: "slow headers", true: "slow body"}[r.slowBody]
		if errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the server did not hang up within 15s (after %s): %v", kind, r.took, r.err)
			continue
		}
		// Else the server closed the connection: with a FIN, or with a
		// reset if the client's latest bytes were still unread, in which
		// case the answer may be lost too.
		if r.status == "" && r.err != nil {
			continue
		}
		i := map[bool]int{false: 0, true: 1}[r.slowBody]
		slowest[i] = max(slowest[i], r.took)
		switch {
		case !r.slowBody && (r.status != "" && !strings.HasPrefix(r.status, "HTTP/1.1 4")):
			t.Errorf("slow headers got %q; want no answer or a 4xx", r.status)
		case r.slowBody && r.status != "HTTP/1.1 408 Request Timeout":
			t.Errorf("slow body got %q; want 408", r.status)
		}
	}
	t.Logf("slowest cut: slow headers %s, slow body %s", slowest[0], slowest[1])
	if slowest[0] > 5*time.Second || slowest[1] > 6*time.Second {
		t.Errorf("slow clients were cut after %s (headers) and %s (body); want about 1s and 2s", slowest[0], slowest[1])
	}

	select {
	case err := <-done:
		t.Fatalf("the server stopped during the attack: %v", err)
	default:
	}
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after the attack = %d; want 200", code)
	}
	normal.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline+20 {
			t.Logf("goroutines: %d before the attack, %d after", baseline, n)
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before the attack, still %d 10s after it:\n%s", baseline, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHeadersOverTheLimitAre431: a request whose headers exceed
// maxHeaderBytes is refused before any handler runs; one just under it is
// served.
func TestHeadersOverTheLimitAre431(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Port = 0
	openServing(&cfg)
	base, _, _ := startRun(t, cfg, io.Discard)
	for _, tc := range []struct {
		name   string
		header int
		want   string
	}{
		{"under the limit", maxHeaderBytes - 1024, "HTTP/1.1 200"},
		{"880 KB, a hostile selector's size", 880_000, "HTTP/1.1 431"},
		{"2 MiB", 2 << 20, "HTTP/1.1 431"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				head := "GET /api/v1/namespaces HTTP/1.1\r\nHost: concord\r\nX-Big: " + strings.Repeat("a", tc.header) + "\r\n\r\n"
				for i := 0; i < len(head) && ctx.Err() == nil; i += 64 << 10 {
					if _, err := io.WriteString(conn, head[i:min(i+64<<10, len(head))]); err != nil {
						return
					}
				}
			}()
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, tc.want) {
				t.Errorf("%d bytes of headers answered %q (%v); want %s", tc.header, line, err, tc.want)
			}
		})
	}
}

func TestInFlightFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("concord", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxRequestsInFlight != 400 || cfg.MaxMutatingRequestsInFlight != 200 {
		t.Errorf("defaults: --max-requests-inflight %d, --max-mutating-requests-inflight %d; want kube-apiserver's 400 and 200",
			cfg.MaxRequestsInFlight, cfg.MaxMutatingRequestsInFlight)
	}
	if cfg.MaxRequestBytesInFlight != 64<<20 {
		t.Errorf("default --max-request-bytes-inflight %d; want 64 MiB", cfg.MaxRequestBytesInFlight)
	}
	if err := fs.Parse([]string{"--max-requests-inflight=0", "--max-mutating-requests-inflight=-1", "--max-request-bytes-inflight=-1"}); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	openServing(&cfg)
	cfg.Complete()
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--max-mutating-requests-inflight: -1 must not be negative") ||
		!strings.Contains(err.Error(), "--max-request-bytes-inflight: -1 must not be negative (0: no limit)") || strings.Contains(err.Error(), "--max-requests-inflight:") {
		t.Errorf("Validate with 0 and -1 = %v; want only the -1s refused (0 is no limit)", err)
	}
}
