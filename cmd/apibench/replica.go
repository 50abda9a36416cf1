package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// replicaSettle is how long a started replica is left idle before its
	// memory is read, after a forced garbage collection and a second.
	replicaSettle = 3 * time.Second
	// replicaWait bounds the start-up of a replica.
	replicaWait = 2 * time.Minute
)

// replica is a concord process apibench started on the target's etcd.
type replica struct {
	cmd   *exec.Cmd
	dir   string
	api   *httpBackend
	start time.Time

	mu    sync.Mutex
	log   []string // the last lines it logged
	exitc chan struct{}
}

// replicaArgs are the flags of a replica: the etcd and key prefix of the
// target, plain HTTP on a free loopback port for anyone (as the targets
// apibench measures), no compaction (the target's etcd is not its own).
func replicaArgs(etcd, prefix, dir string) []string {
	return []string{"--etcd-servers", etcd, "--etcd-prefix", prefix, "--port", "0", "--data-dir", dir,
		"--insecure-serving", "--anonymous-auth", "--authorization-mode", "AlwaysAllow",
		"--log-format", "json", "--etcd-compaction-interval", "0"}
}

// startReplica starts bin and waits for its "concord ready" log line,
// which carries its URL.
func startReplica(ctx context.Context, cfg Config) (*replica, error) {
	dir, err := os.MkdirTemp("", "apibench-replica-")
	if err != nil {
		return nil, err
	}
	r := &replica{dir: dir, exitc: make(chan struct{})}
	r.cmd = exec.Command(cfg.ReplicaBin, replicaArgs(cfg.ReplicaEtcd, cfg.EtcdPrefix, dir)...)
	pr, pw := io.Pipe()
	r.cmd.Stdout, r.cmd.Stderr = pw, pw
	r.start = time.Now()
	if err := r.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", cfg.ReplicaBin, err)
	}
	go func() {
		_ = r.cmd.Wait()
		pw.Close()
		close(r.exitc)
	}()
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.log = append(r.log[max(0, len(r.log)-19):], line)
			r.mu.Unlock()
			var l struct {
				Msg string `json:"msg"`
				URL string `json:"url"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "concord ready" && l.URL != "" {
				select {
				case urlc <- l.URL:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case u := <-urlc:
		r.api = newHTTPBackend(u, 4, 30*time.Second)
		return r, nil
	case <-r.exitc:
		err = fmt.Errorf("replica %s exited before it was ready; it logged:\n%s", cfg.ReplicaBin, r.lastLog())
	case <-time.After(replicaWait):
		err = fmt.Errorf("replica %s not ready after %s; it logged:\n%s", cfg.ReplicaBin, replicaWait, r.lastLog())
	case <-ctx.Done():
		err = ctx.Err()
	}
	r.stop()
	return nil, err
}

func (r *replica) lastLog() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, "\n")
}

// waitReady polls /readyz until it answers 200 and returns the time since
// the process was started.
func (r *replica) waitReady(ctx context.Context) (time.Duration, error) {
	deadline := time.Now().Add(replicaWait)
	for {
		code, _, _, err := r.api.fetch(ctx, "/readyz", "text/plain", false)
		if err == nil && code == http.StatusOK {
			return time.Since(r.start), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("replica /readyz: %d, %v after %s", code, err, replicaWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitServed polls the replica's aggregated discovery until it lists want
// groups ending in suffix; the time since the process was started, and the
// groups it lists.
func (r *replica) waitServed(ctx context.Context, suffix string, want int) (time.Duration, int, error) {
	deadline := time.Now().Add(replicaWait)
	for {
		groups, _, err := r.api.discoveryGroups(ctx)
		if err == nil && countSuffix(groups, suffix) >= want {
			return time.Since(r.start), len(groups), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, 0, fmt.Errorf("replica serves %d of %d CRDs after %s (%v)", countSuffix(groups, suffix), want, replicaWait, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricValue is the value of an unlabelled metric in Prometheus' text
// format, NaN when it is missing.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return nan
}

// stop ends the replica with SIGTERM (SIGKILL after 15 s) and removes its
// directory.
func (r *replica) stop() {
	if r.api != nil {
		r.api.close()
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exitc:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exitc
	}
	os.RemoveAll(r.dir)
}
