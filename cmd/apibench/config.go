package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Target kinds: a kube API base URL over plain HTTP, a kubeconfig (host, TLS
// and credentials from the file), or raw etcd doing the same operations as
// bare transactions on the same key layout.
const (
	kindURL        = "url"
	kindKubeconfig = "kubeconfig"
	kindEtcd       = "etcd"
)

// The workloads, in the order they run when several are selected.
// defaultWorkloads run when --workload is not given; apply (server-side
// apply, API targets only) and crds (install many CRDs, then time
// discovery, OpenAPI, start-up and memory) run only when asked for, crds
// last.
var (
	defaultWorkloads = []string{"create", "update", "contended", "get", "list", "watch"}
	allWorkloads     = append(slices.Clone(defaultWorkloads), "apply", "crds")
)

// The resources the API workloads can write (--resource): ConfigMaps, or
// widgets, a custom resource whose CRD apibench installs.
var allResources = []string{"configmaps", "widgets"}

// TargetSpec is one --target, --kubeconfig or --etcd flag.
type TargetSpec struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Addr is the URL (url), the file (kubeconfig) or the comma-separated
	// client URLs (etcd).
	Addr string `json:"addr"`
}

// Config is everything a run is started with. Flags bind to it in AddFlags;
// Validate says what is wrong before anything starts.
type Config struct {
	// Targets in the order the flags were given; the first is the one
	// every ratio is relative to.
	Targets    []TargetSpec
	EtcdPrefix string
	Workloads  []string
	Rounds     int
	// Duration is the length of one target's window in one round.
	Duration time.Duration
	Workers  int
	// ObjectSize is the bytes of data every ConfigMap carries; a custom
	// object carries fewer, so that its JSON is as long (resource.go).
	ObjectSize int
	// Resources are what the API targets' workloads write, each measured
	// as a target of its own (etcd targets keep Concord's ConfigMap
	// layout); the first is the one resourceRatio is relative to.
	Resources []string
	// Protobuf makes the API targets' workloads send and accept Kubernetes
	// protobuf for ConfigMaps; custom resources stay JSON (kube serves no
	// protobuf for them), and raw etcd is unaffected.
	Protobuf    bool
	GetObjects  int
	ListObjects int
	Watchers    int
	// WriteRate is the watch workload's writes per second.
	WriteRate float64
	// WatchDrain bounds the wait, after the last write of a watch window,
	// for every watcher to receive it.
	WatchDrain     time.Duration
	Namespace      string
	Keep           bool
	JSON           bool
	Progress       string
	RequestTimeout time.Duration
	// ServerPIDs and EtcdPIDs map a target name to the process serving it
	// (for an etcd target: etcd itself) and to the etcd behind it.
	ServerPIDs map[string]int
	EtcdPIDs   map[string]int
	// CRDs is how many CRDs the crds workload installs.
	CRDs int
	// ReplicaBin, when set, is the concord binary the crds workload starts
	// replicas of on ReplicaEtcd (the target's etcd), to time their
	// start-up and measure their memory with 0 and with CRDs CRDs.
	ReplicaBin  string
	ReplicaEtcd string
}

// DefaultConfig is issue 7's set-up: 16 workers, 1 KiB objects, 5 rounds of
// 5 s per target, lists of 2,000 objects, 200 watchers at 200 writes/s.
func DefaultConfig() Config {
	return Config{
		EtcdPrefix:     "/registry",
		Workloads:      slices.Clone(defaultWorkloads),
		Rounds:         5,
		Duration:       5 * time.Second,
		Workers:        16,
		ObjectSize:     1024,
		Resources:      []string{"configmaps"},
		GetObjects:     1000,
		ListObjects:    2000,
		Watchers:       200,
		WriteRate:      200,
		WatchDrain:     10 * time.Second,
		Namespace:      "apibench",
		Progress:       "auto",
		RequestTimeout: 30 * time.Second,
		ServerPIDs:     map[string]int{},
		EtcdPIDs:       map[string]int{},
		CRDs:           500,
	}
}

// AddFlags binds the flags to cfg. Targets keep the order of their flags,
// whatever their kind.
func (cfg *Config) AddFlags(fs *flag.FlagSet) {
	target := func(kind string) func(string) error {
		return func(s string) error {
			name, addr, ok := strings.Cut(s, "=")
			if !ok || name == "" || addr == "" {
				return fmt.Errorf("%q is not name=%s", s, map[string]string{kindURL: "URL", kindKubeconfig: "PATH", kindEtcd: "URL"}[kind])
			}
			cfg.Targets = append(cfg.Targets, TargetSpec{Name: name, Kind: kind, Addr: addr})
			return nil
		}
	}
	fs.Func("target", "`name=URL` of a Kubernetes-compatible API over plain HTTP (http://127.0.0.1:8080); repeatable", target(kindURL))
	fs.Func("kubeconfig", "`name=PATH` of a kubeconfig whose current context is the API to measure (host, TLS and credentials from it); repeatable", target(kindKubeconfig))
	fs.Func("etcd", "`name=URL` of raw etcd (comma-separated client URLs), measured with the same operations as bare etcd transactions; repeatable", target(kindEtcd))
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", cfg.EtcdPrefix, "key prefix of the etcd targets' keys (<prefix>/configmaps/<namespace>/<name>, as Concord's)")
	fs.Func("workload", "comma-separated workloads, run in this order: "+strings.Join(allWorkloads, ",")+" (default "+strings.Join(defaultWorkloads, ",")+"; apply and crds only when named)", func(s string) error {
		cfg.Workloads = commaList(s)
		return nil
	})
	fs.Func("resource", "comma-separated resources the API targets' workloads write: "+strings.Join(allResources, ",")+
		" (a custom resource whose CRD, with one CEL rule, apibench installs); each is measured as a target of its own, and the others get their ratio to the first (default configmaps)", func(s string) error {
		cfg.Resources = commaList(s)
		return nil
	})
	fs.BoolVar(&cfg.Protobuf, "protobuf", cfg.Protobuf, "API targets send and accept Kubernetes protobuf (application/vnd.kubernetes.protobuf, client-go's default) instead of JSON for ConfigMaps, watches included; widgets stay JSON, as kube serves no protobuf for custom resources")
	fs.IntVar(&cfg.CRDs, "crds", cfg.CRDs, "CRDs the crds workload installs (distinct groups and kinds, small schemas)")
	fs.StringVar(&cfg.ReplicaBin, "replica-bin", cfg.ReplicaBin, "concord binary the crds workload starts replicas of on --replica-etcd, to time their start-up and measure memory per idle CRD (none: not measured)")
	fs.StringVar(&cfg.ReplicaEtcd, "replica-etcd", cfg.ReplicaEtcd, "comma-separated etcd client URLs of the target, for the replicas of --replica-bin (their --etcd-servers)")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds of every workload; each round gives every target one window, in flag order")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of one target's window in one round")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent workers of create, update, contended, get and list")
	fs.IntVar(&cfg.ObjectSize, "object-size", cfg.ObjectSize, "bytes of data in every ConfigMap (a custom object carries fewer, so that its JSON is as long)")
	fs.IntVar(&cfg.GetObjects, "get-objects", cfg.GetObjects, "objects the get workload reads at random")
	fs.IntVar(&cfg.ListObjects, "list-objects", cfg.ListObjects, "objects every list of the list workload returns")
	fs.IntVar(&cfg.Watchers, "watchers", cfg.Watchers, "watches the watch workload opens per window")
	fs.Float64Var(&cfg.WriteRate, "write-rate", cfg.WriteRate, "writes per second to the watched object in the watch workload")
	fs.DurationVar(&cfg.WatchDrain, "watch-drain", cfg.WatchDrain, "how long to wait after the last write of a watch window for every watcher to receive it")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace of the run (created if missing); list and watch use <namespace>-list-<target> and <namespace>-watch-<target>")
	fs.BoolVar(&cfg.Keep, "keep", cfg.Keep, "keep the objects (and namespaces) the run created instead of deleting them at the end")
	fs.BoolVar(&cfg.JSON, "json", cfg.JSON, "print the results as JSON instead of a table")
	fs.StringVar(&cfg.Progress, "progress", cfg.Progress, "progress on stderr: auto (an updated line on a terminal, a line per window otherwise), line, or none")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "longest time one request may take")
	pid := func(into map[string]int) func(string) error {
		return func(s string) error {
			name, p, ok := strings.Cut(s, "=")
			n, err := strconv.Atoi(p)
			if !ok || name == "" || err != nil || n <= 0 {
				return fmt.Errorf("%q is not name=PID", s)
			}
			into[name] = n
			return nil
		}
	}
	fs.Func("server-pid", "`name=PID` of the process serving target name (for an etcd target, etcd): its CPU in every window, and its RSS per watcher; repeatable", pid(cfg.ServerPIDs))
	fs.Func("etcd-pid", "`name=PID` of the etcd behind target name: its CPU in every window; repeatable", pid(cfg.EtcdPIDs))
}

// Complete puts the workloads in the order they run, whatever the flag's
// order.
func (cfg *Config) Complete() {
	slices.SortStableFunc(cfg.Workloads, func(a, b string) int {
		return slices.Index(allWorkloads, a) - slices.Index(allWorkloads, b)
	})
}

// commaList splits a comma-separated flag value, without blanks or
// repeats.
func commaList(s string) []string {
	var out []string
	for _, w := range strings.Split(s, ",") {
		if w = strings.TrimSpace(w); w != "" && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// targetName keeps names short DNS labels: they become parts of namespace
// and object names.
var targetName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$`)

// Validate reports every invalid setting at once.
func (cfg *Config) Validate() error {
	var errs []error
	if len(cfg.Targets) == 0 {
		errs = append(errs, errors.New("no target: give at least one --target name=URL, --kubeconfig name=PATH or --etcd name=URL"))
	}
	seen := map[string]bool{}
	for _, t := range cfg.Targets {
		flagName := "--" + map[string]string{kindURL: "target", kindKubeconfig: "kubeconfig", kindEtcd: "etcd"}[t.Kind]
		if !targetName.MatchString(t.Name) {
			errs = append(errs, fmt.Errorf("%s %s=...: the name must be 1-20 lower-case letters, digits or '-' (it becomes part of namespace and object names)", flagName, t.Name))
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("%s: target name %q is used twice", flagName, t.Name))
		}
		seen[t.Name] = true
		switch t.Kind {
		case kindURL:
			if !strings.HasPrefix(t.Addr, "http://") && !strings.HasPrefix(t.Addr, "https://") {
				errs = append(errs, fmt.Errorf("%s %s=%s: not a URL like http://127.0.0.1:8080", flagName, t.Name, t.Addr))
			}
		case kindEtcd:
			for _, u := range strings.Split(t.Addr, ",") {
				if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
					errs = append(errs, fmt.Errorf("%s %s=%s: %q is not a URL like http://127.0.0.1:2379", flagName, t.Name, t.Addr, u))
				}
			}
		}
	}
	for flagName, pids := range map[string]map[string]int{"--server-pid": cfg.ServerPIDs, "--etcd-pid": cfg.EtcdPIDs} {
		for name := range pids {
			if !seen[name] {
				errs = append(errs, fmt.Errorf("%s %s=...: there is no target %q", flagName, name, name))
			}
		}
	}
	if !strings.HasPrefix(cfg.EtcdPrefix, "/") || strings.Contains(cfg.EtcdPrefix, "..") {
		errs = append(errs, fmt.Errorf("--etcd-prefix: %q must be an absolute key prefix like /registry", cfg.EtcdPrefix))
	}
	if len(cfg.Workloads) == 0 {
		errs = append(errs, errors.New("--workload: none given"))
	}
	for _, w := range cfg.Workloads {
		if !slices.Contains(allWorkloads, w) {
			errs = append(errs, fmt.Errorf("--workload: %q is not one of %s", w, strings.Join(allWorkloads, ",")))
		}
	}
	if len(cfg.Resources) == 0 {
		errs = append(errs, errors.New("--resource: none given"))
	}
	for _, r := range cfg.Resources {
		if !slices.Contains(allResources, r) {
			errs = append(errs, fmt.Errorf("--resource: %q is not one of %s", r, strings.Join(allResources, ",")))
		}
	}
	api := false
	for _, t := range cfg.Targets {
		api = api || t.Kind != kindEtcd
	}
	if cfg.Protobuf && !api && len(cfg.Targets) > 0 {
		errs = append(errs, errors.New("--protobuf: needs an API target (--target or --kubeconfig); raw etcd is measured with its own gRPC requests"))
	}
	if slices.Contains(cfg.Workloads, "crds") {
		if !api && len(cfg.Targets) > 0 {
			errs = append(errs, errors.New("--workload crds: needs an API target (--target or --kubeconfig); raw etcd has no CRDs"))
		}
		if cfg.CRDs <= 0 || cfg.CRDs > 10000 {
			errs = append(errs, fmt.Errorf("--crds: %d must be 1-10000", cfg.CRDs))
		}
	}
	if (cfg.ReplicaBin == "") != (cfg.ReplicaEtcd == "") {
		errs = append(errs, errors.New("--replica-bin and --replica-etcd: give both or neither"))
	}
	for _, u := range strings.Split(cfg.ReplicaEtcd, ",") {
		if cfg.ReplicaEtcd != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			errs = append(errs, fmt.Errorf("--replica-etcd: %q is not a URL like http://127.0.0.1:2379", u))
		}
	}
	if !regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`).MatchString(cfg.Namespace) || len(cfg.Namespace) > 30 {
		errs = append(errs, fmt.Errorf("--namespace: %q must be a DNS label of at most 30 characters", cfg.Namespace))
	}
	positive := map[string]int{"--rounds": cfg.Rounds, "--workers": cfg.Workers, "--object-size": cfg.ObjectSize,
		"--get-objects": cfg.GetObjects, "--list-objects": cfg.ListObjects, "--watchers": cfg.Watchers}
	for name, n := range positive {
		if n <= 0 {
			errs = append(errs, fmt.Errorf("%s: %d must be positive", name, n))
		}
	}
	if cfg.ObjectSize > 512<<10 {
		errs = append(errs, fmt.Errorf("--object-size: %d is more than 512 KiB", cfg.ObjectSize))
	}
	if cfg.WriteRate <= 0 {
		errs = append(errs, fmt.Errorf("--write-rate: %g must be positive", cfg.WriteRate))
	}
	for name, d := range map[string]time.Duration{"--duration": cfg.Duration, "--request-timeout": cfg.RequestTimeout, "--watch-drain": cfg.WatchDrain} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: %s must be positive", name, d))
		}
	}
	if !slices.Contains([]string{"auto", "line", "none"}, cfg.Progress) {
		errs = append(errs, fmt.Errorf("--progress: %q is not auto, line or none", cfg.Progress))
	}
	return errors.Join(errs...)
}
