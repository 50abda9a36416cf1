package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// healthCheck is one named check of a health endpoint.
type healthCheck struct {
	name  string
	check func(ctx context.Context) error
}

// storageCheckTimeout bounds an etcd check that asks etcd, as
// kube-apiserver's --etcd-healthcheck-timeout (2s) does. The server's own
// check (etcdstore.Monitor.Check) answers from the monitor's last probes
// at once: a /readyz that waited for etcd could outlast the load
// balancer's check timeout and take healthy replicas out.
const storageCheckTimeout = 2 * time.Second

// errShuttingDown is the shutdown check's failure.
var errShuttingDown = errors.New("process is shutting down")

// errCRDsNotSynced is the CRD check's failure.
var errCRDsNotSynced = errors.New("the custom resources of the stored CRDs are not served yet")

// PostStartHook is start-up work a replica does while it serves, as
// kube-apiserver's post-start hooks: /readyz's check poststarthook/<Name>
// fails until Check returns nil. Check must answer at once (from the
// work's state, never asking etcd).
type PostStartHook struct {
	Name string
	// Check: nil once the work is done; else what it waits for (logged,
	// withheld from the response as every reason).
	Check func() error
}

// healthEndpoints are /livez, /readyz and /healthz, each with its checks in
// the order they run:
//
//	livez:   ping                  (no etcd: a replica cut off from etcd is
//	                                alive, restarting it would not help)
//	readyz:  ping, etcd, poststarthook/<hook>..., poststarthook/crd-
//	         informer-synced, shutdown
//	                               (take this replica out of the load
//	                                balancer when etcd is gone or it stops;
//	                                etcd: StorageCheck, answered from the
//	                                endpoint monitor's probes; the start-up
//	                                steps are done; the CRDs stored at start
//	                                are served)
//	healthz: ping, etcd            (deprecated in Kubernetes; kept for tools)
func healthEndpoints(storage func(ctx context.Context) error, shutdownInitiated, crdsSynced <-chan struct{}, hooks ...PostStartHook) map[string]*healthEndpoint {
	ping := healthCheck{"ping", func(context.Context) error { return nil }}
	var etcd []healthCheck
	if storage != nil {
		etcd = append(etcd, healthCheck{"etcd", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, storageCheckTimeout)
			defer cancel()
			return storage(ctx)
		}})
	}
	shutdown := healthCheck{"shutdown", func(context.Context) error {
		select {
		case <-shutdownInitiated: // a nil channel never fires
			return errShuttingDown
		default:
			return nil
		}
	}}
	var started []healthCheck
	for _, h := range hooks {
		started = append(started, healthCheck{"poststarthook/" + h.Name, func(context.Context) error { return h.Check() }})
	}
	if crdsSynced != nil {
		started = append(started, healthCheck{"poststarthook/crd-informer-synced", func(context.Context) error {
			select {
			case <-crdsSynced:
				return nil
			default:
				return errCRDsNotSynced
			}
		}})
	}
	return map[string]*healthEndpoint{
		"livez":   {name: "livez", checks: []healthCheck{ping}},
		"readyz":  {name: "readyz", checks: slices.Concat([]healthCheck{ping}, etcd, started, []healthCheck{shutdown})},
		"healthz": {name: "healthz", checks: slices.Concat([]healthCheck{ping}, etcd)},
	}
}

// healthEndpoint answers as kube-apiserver's healthz package does
// (apiserver/pkg/server/healthz/healthz.go): "ok" when every check passes;
// with ?verbose a line per check and "<name> check passed"; on a failure
// 500 with a line per check, the failed ones "[-]<check> failed: reason
// withheld", and "<name> check failed". The reasons go to the log only.
// ?exclude=<check> (repeatable) skips a check.
type healthEndpoint struct {
	name   string
	checks []healthCheck
}

// serveHTTP serves /<name> (check "") and /<name>/<check>.
func (h *healthEndpoint) serveHTTP(w http.ResponseWriter, r *http.Request, check string) {
	if check == "" {
		h.serveAll(w, r)
		return
	}
	i := slices.IndexFunc(h.checks, func(c healthCheck) bool { return c.name == check })
	if i < 0 {
		notFound(w, r)
		return
	}
	infoOf(r).subresource = r.URL.Path
	if err := h.checks[i].check(r.Context()); err != nil {
		logger(r).Warn("health check failed", "path", r.URL.Path, "checks", []string{check}, "err", err)
		http.Error(w, "internal server error: reason withheld", http.StatusInternalServerError)
		return
	}
	writeHealthy(w, "ok")
}

func (h *healthEndpoint) serveAll(w http.ResponseWriter, r *http.Request) {
	infoOf(r).subresource = r.URL.Path
	excluded := map[string]bool{}
	for _, name := range r.URL.Query()["exclude"] {
		excluded[name] = true
	}
	var out, details bytes.Buffer
	var failed []string
	for _, c := range h.checks {
		if excluded[c.name] {
			delete(excluded, c.name)
			fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.name)
			continue
		}
		if err := c.check(r.Context()); err != nil {
			fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.name)
			fmt.Fprintf(&details, "[-]%s failed: %v\n", c.name, err)
			failed = append(failed, c.name)
			continue
		}
		fmt.Fprintf(&out, "[+]%s ok\n", c.name)
	}
	if len(excluded) > 0 {
		var names []string
		for name := range excluded {
			names = append(names, fmt.Sprintf("%q", name))
		}
		slices.Sort(names)
		fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(names, ","))
	}
	if len(failed) > 0 {
		logger(r).Warn("health check failed", "path", r.URL.Path, "checks", failed, "details", details.String())
		http.Error(w, fmt.Sprintf("%s%s check failed", out.String(), h.name), http.StatusInternalServerError)
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; !verbose {
		writeHealthy(w, "ok")
		return
	}
	writeHealthy(w, fmt.Sprintf("%s%s check passed\n", out.String(), h.name))
}

func writeHealthy(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	fmt.Fprint(w, body)
}
