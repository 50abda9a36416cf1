package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/apiserver"
	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller/crdcleanup"
	"github.com/concord-dev/concord/registry/controller/crdstatus"
	"github.com/concord-dev/concord/registry/controller/leaderelect"
	"github.com/concord-dev/concord/registry/crdserving"
)

// run serves until ctx is cancelled, then shuts down in order:
//
//  1. /readyz fails (its shutdown check), while everything is still served;
//  2. after --shutdown-delay-duration, by when load balancers have taken the
//     replica out, stop taking requests: watches end at once (their clients
//     reconnect elsewhere), other requests may finish within
//     --shutdown-timeout;
//  3. stop the etcd endpoint monitor, close the etcd client, stop the
//     embedded etcd.
//
// ready, if not nil, is called with the server's URL once it serves.
func Run(ctx context.Context, cfg Config, logOut io.Writer, ready func(url string)) error {
	log := newLogger(cfg.LogFormat, logOut)
	cfg.logIgnoredFlags(log)
	etcdTLS, err := cfg.etcdTLS()
	if err != nil {
		return err
	}
	encryptAtRest, err := cfg.encryption()
	if err != nil {
		return err
	}
	unconditional, err := registry.ParseUnconditionalUpdate(cfg.UnconditionalUpdate)
	if err != nil {
		return fmt.Errorf("--unconditional-update: %w", err)
	}
	if encryptAtRest != nil {
		log.Info("encryption at rest", "config", cfg.EncryptionProviderConfig, "writes", encryptAtRest.Writers(servedResources()))
	}

	// Bind first: a taken port is the most common start-up failure, and it
	// should be reported before anything else starts.
	addr := net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w (is another server using the port? pick another with --port, or --port 0 for a free one)", addr, err)
	}
	defer ln.Close()

	// TLS, authentication, authorization and the audit log, before etcd
	// starts: a bad file or certificate fails the start at once.
	sec, err := cfg.buildSecurity(log)
	if err != nil {
		return err
	}
	if sec.audit != nil {
		defer sec.audit.Close()
	}
	saKeys, err := cfg.serviceAccountKeys(log)
	if err != nil {
		return err
	}

	endpoints := cfg.EtcdServers
	var embedded *etcdstore.Embedded
	if cfg.Embedded() {
		etcdDir := filepath.Join(cfg.DataDir, "etcd")
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("create --data-dir: %w", err)
		}
		etcdLog := filepath.Join(cfg.DataDir, "etcd.log")
		log.Info("starting embedded etcd", "dir", etcdDir, "log", etcdLog)
		embedded, err = etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{Dir: etcdDir, LogFile: etcdLog, StartTimeout: cfg.EtcdDialTimeout})
		if err != nil {
			return err
		}
		defer embedded.Close()
		endpoints = []string{embedded.Endpoint()}
	}

	etcdCfg := etcdClientConfig(endpoints, etcdTLS)
	client, err := connectEtcd(ctx, log, etcdCfg, cfg.EtcdDialTimeout)
	if err != nil {
		return err
	}
	defer client.Close()

	// Metrics go to a registry of this server's own, never the global one.
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The groups of the resources are set as the catalog serves them
	// (below).
	storeMetrics, err := etcdstore.NewMetrics(metrics, nil)
	if err != nil {
		return err
	}
	compactions := newCompactionMetrics(metrics)
	// The monitor keeps requests away from members that stop answering and
	// is what /readyz's etcd check reads: it fails once no member answered
	// for the etcd request timeout, since requests wait that long. A
	// shorter outage (an election, a starved probe) must not take every
	// replica out of the load balancer at once.
	monitor, err := etcdstore.StartMonitor(client, etcdstore.MonitorConfig{
		Client: etcdCfg, Prefix: cfg.EtcdPrefix, Logger: log, Registerer: metrics,
		ReadyWithin: cfg.EtcdRequestTimeout,
	})
	if err != nil {
		return err
	}
	defer monitor.Close()

	store := etcdstore.NewWithOptions(client, cfg.EtcdPrefix, etcdstore.Options{
		RequestTimeout: cfg.EtcdRequestTimeout,
		Metrics:        storeMetrics,
		TTL:            map[string]time.Duration{registry.Events.Plural: cfg.EventTTL},
		Bump:           registry.RBACBump(),
		// Revision reads go round the members the monitor sees answer.
		Monitor: monitor,
	})
	// Writes allowed by RBAC without waiting carry its guard (filters.Fence).
	fenced := registry.FencedStorage(store)
	storeOpts := []registry.StoreOption{registry.WithEncryption(encryptAtRest), registry.WithUnconditionalUpdate(unconditional)}
	if !cfg.WatchCache {
		storeOpts = append(storeOpts, registry.WithoutReadCache())
	}
	stores := registry.NewStores(fenced, registry.DefaultWatchConfig(), storeOpts...)
	// The resources served: the built-ins now, others as they are added.
	catalog := registry.NewCatalog(stores)
	catalog.OnAdd(func(s *registry.Store) {
		if res := s.Resource; res.Storage == nil { // the key space is the stored version's
			storeMetrics.SetGroup(keyResource(res), res.GroupVersion.Group)
		}
	})
	// Every replica serves the custom resources of the stored CRDs, and
	// keeps the CRDs' names and conditions (as every kube-apiserver does).
	crds, _ := catalog.Lookup(registry.CustomResourceDefinitions.GroupVersion.Group, registry.CustomResourceDefinitions.GroupVersion.Version, registry.CustomResourceDefinitions.Plural)
	newStore := func(storage registry.Storage, res *registry.Resource) *registry.Store {
		return registry.NewStore(storage, res, registry.DefaultWatchConfig(), storeOpts...)
	}
	crdServer := crdserving.New(crds, catalog, fenced, newStore, log)
	go crdServer.Run(ctx)
	go crdstatus.New(crds, log).Run(ctx)
	go crdcleanup.New(crds, store, newStore, log).Run(ctx)
	// kube-controller-manager's controllers run on one replica at a time,
	// each under a Lease of its own in kube-system.
	elect := leaderelect.NewElector(cfg.LeaderElection, coreStore(catalog, registry.Leases), log)
	steps := startupSteps(ctx, cfg, stores, catalog, store, elect, sec, log)

	tokenIssuer, tokenAuthn, err := saKeys.tokens(cfg.ServiceAccounts, catalog)
	if err != nil {
		return err
	}
	if tokenAuthn != nil { // not a typed nil in the interface
		sec.authn.TokenAuthenticator = tokenAuthn
	}

	var origins []*regexp.Regexp
	for _, o := range cfg.CORSAllowedOrigins {
		origins = append(origins, regexp.MustCompile(o)) // checked by Validate
	}
	shutdownInitiated := make(chan struct{})
	handler := apiserver.New(apiserver.Config{
		Catalog:            catalog,
		Logger:             log,
		RequestTimeout:     cfg.RequestTimeout,
		CORSAllowedOrigins: origins,
		StorageCheck:       monitor.Check,
		ShutdownInitiated:  shutdownInitiated,
		CRDsSynced:         crdServer.Synced(),
		PostStartHooks:     steps.hooks(),
		Metrics:            metrics,

		MaxRequestsInFlight:         cfg.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight: cfg.MaxMutatingRequestsInFlight,
		MaxRequestBytesInFlight:     cfg.MaxRequestBytesInFlight,

		Authentication: sec.authn,
		Authorizer:     sec.authz,
		AuditLog:       sec.audit,
		Profiling:      cfg.Profiling,
		TokenIssuer:    tokenIssuer,
		OpenIDMetadata: saKeys.openIDMetadata(),
	})
	// A client that sends its headers slowly (or not at all) is cut off
	// after readHeaderTimeout, an idle keep-alive connection after
	// IdleTimeout; headers are at most maxHeaderBytes (431 beyond).
	readHeaderTimeout := cfg.ReadHeaderTimeout
	if readHeaderTimeout <= 0 {
		readHeaderTimeout = 32 * time.Second
	}
	drain := newDrainer()
	srv := &http.Server{
		Handler:           drain.handler(handler),
		ConnState:         drain.connState,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		// No ReadTimeout or WriteTimeout: watches are long-running. Other
		// requests are bounded by --request-timeout inside the handler,
		// including the reading of their body and the writing of their
		// response (apiserver's limits).
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// nil with --insecure-serving; otherwise HTTPS, with HTTP/2.
		TLSConfig: sec.tls,
	}

	// Shutdown waits for requests to finish; watches end at once, so their
	// clients reconnect to another replica.
	srv.RegisterOnShutdown(func() {
		for _, s := range catalog.Stores() {
			s.StopWatches()
		}
	})

	scheme := "https://"
	if sec.tls == nil {
		scheme = "http://"
	}
	url := scheme + kubeconfigHost(ln.Addr().(*net.TCPAddr))
	if cfg.WriteKubeconfig != "" {
		if err := writeKubeconfig(cfg.WriteKubeconfig, url, sec.kubeconfig); err != nil {
			return err
		}
	}

	compactCtx, stopCompacting := context.WithCancel(ctx)
	defer stopCompacting()
	if cfg.EtcdCompactionInterval > 0 {
		go runCompactor(compactCtx, log, store.NewCompactor(), cfg.EtcdCompactionInterval, compactions)
	}

	serveErr := make(chan error, 1)
	go func() {
		if sec.tls != nil {
			serveErr <- srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	go steps.run(ctx, log)
	// Ready means the start-up steps done and the custom resources of the
	// stored CRDs served too, as /readyz says (its poststarthook checks).
	waitStarted(ctx, log, cfg.EtcdDialTimeout, steps.done, crdServer.Synced())
	log.Info("concord ready", "url", url, "kubeconfig", cfg.WriteKubeconfig, "etcd", strings.Join(endpoints, ","), "prefix", cfg.EtcdPrefix)
	if ready != nil {
		ready(url)
	}

	var etcdErr <-chan error
	if embedded != nil {
		etcdErr = embedded.Err()
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case err := <-etcdErr:
		return fmt.Errorf("embedded etcd stopped: %w", err)
	case <-ctx.Done():
	}

	close(shutdownInitiated)
	if cfg.ShutdownDelayDuration > 0 {
		log.Info("shutting down: /readyz fails now; still serving while load balancers notice", "delay", cfg.ShutdownDelayDuration.String())
		select {
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-time.After(cfg.ShutdownDelayDuration):
		}
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", cfg.ShutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := drain.shutdown(shutdownCtx, srv); err != nil {
		return fmt.Errorf("shutdown: in-flight requests did not finish within %s: %w", cfg.ShutdownTimeout, err)
	}
	// Watches that took their connection over from net/http are not
	// among the requests Shutdown waits for.
	if err := handler.WaitWatches(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: watches did not end within %s: %w", cfg.ShutdownTimeout, err)
	}
	log.Info("stopped")
	return nil
}

// keyResource is a declaration's part of its etcd keys, which the etcd
// metrics know it by.
// maxHeaderBytes bounds a request's line and headers (kube-apiserver's
// bound is 1 MiB). net/http holds about two copies of them while it reads
// them, before any handler, in-flight limit or selector limit can look:
// 200 clients sending 880 KB selectors held some 350 MiB that way. Nothing
// Concord serves needs more: selectors are at most 10 KiB, tokens a few.
const maxHeaderBytes = 128 << 10

func keyResource(res *registry.Resource) string {
	if res.StoragePrefix != "" {
		return res.StoragePrefix
	}
	return res.Plural
}

// compactionMetrics say whether compaction runs: with several replicas one
// of them compacts each round, so watch their sum.
type compactionMetrics struct {
	compactions prometheus.Counter
	revision    prometheus.Gauge
}

func newCompactionMetrics(reg prometheus.Registerer) *compactionMetrics {
	m := &compactionMetrics{
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "concord_etcd_compactions_total",
			Help: "Compactions of etcd's history this replica did (one replica compacts per --etcd-compaction-interval).",
		}),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "concord_etcd_compacted_revision",
			Help: "The etcd revision this replica last compacted to (0: none yet).",
		}),
	}
	reg.MustRegister(m.compactions, m.revision)
	return m
}

// runCompactor runs a compaction round every interval until ctx ends.
func runCompactor(ctx context.Context, log *slog.Logger, c *etcdstore.Compactor, interval time.Duration, m *compactionMetrics) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			roundCtx, cancel := context.WithTimeout(ctx, time.Minute)
			rev, err := c.Round(roundCtx)
			cancel()
			switch {
			case err != nil:
				log.Warn("etcd compaction failed; will retry next interval", "err", err)
			case rev > 0:
				m.compactions.Inc()
				m.revision.Set(float64(rev))
				log.Info("etcd history compacted", "revision", rev)
			}
		}
	}
}

func newLogger(format string, out io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(out, nil))
	}
	return slog.New(slog.NewTextHandler(out, nil))
}

// Keepalive of the etcd client's connections, kube-apiserver's
// (apiserver/pkg/storage/storagebackend/factory/etcd3.go, newETCD3Client):
// after etcdKeepaliveTime without a frame from a member the client pings
// it, and closes the connection when the ping is not answered within
// etcdKeepaliveTimeout, so that requests and watches move to another
// member. That takes up to 40 s; the endpoint monitor (etcdstore.Monitor)
// takes a silent member out within about a second.
const (
	etcdKeepaliveTime    = 30 * time.Second
	etcdKeepaliveTimeout = 10 * time.Second
)

// etcdClientConfig is the configuration of the server's etcd client, and of
// the endpoint monitor's clients. Like kube-apiserver it leaves
// PermitWithoutStream off: etcd's keepalive enforcement policy does not
// permit pings on a connection without streams and closes a connection
// that keeps sending them (too_many_pings); the client pings while
// requests or watches (the read caches') are open.
func etcdClientConfig(endpoints []string, tlsCfg *tls.Config) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    etcdKeepaliveTime,
		DialKeepAliveTimeout: etcdKeepaliveTimeout,
		TLS:                  tlsCfg,
		Logger:               zap.NewNop(),
	}
}

// connectEtcd waits until an etcd member answers a read, for at most
// timeout, and says which endpoints did not answer and for how long.
func connectEtcd(ctx context.Context, log *slog.Logger, cfg clientv3.Config, timeout time.Duration) (*clientv3.Client, error) {
	endpoints := cfg.Endpoints
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(endpoints, ","), err)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		// Serializable: a member answers without a leader, so a start
		// during an election or without quorum goes on (the start-up
		// steps wait for etcd, /readyz failing, and the process stays up);
		// an endpoint where no etcd answers is a configuration to fix.
		_, err = client.Get(attemptCtx, "/concord-start-probe", clientv3.WithSerializable())
		cancel()
		if err == nil {
			return client, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			client.Close()
			return nil, fmt.Errorf("etcd at %s did not answer for %s (last error: %w); check --etcd-servers and that etcd is running",
				strings.Join(endpoints, ","), time.Since(start).Round(time.Second), err)
		}
		log.Warn("waiting for etcd", "endpoints", strings.Join(endpoints, ","), "waited", time.Since(start).Round(time.Second).String(), "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// kubeconfigHost is the address clients should use: loopback when the
// server listens on all interfaces.
func kubeconfigHost(addr *net.TCPAddr) string {
	ip := addr.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port))
}

// writeKubeconfig writes a kubeconfig with one cluster, user and context
// named "concord", replacing the file atomically; auth is the CA and the
// credential it carries, if any.
func writeKubeconfig(path, server string, auth kubeconfigAuth) error {
	cfg := clientcmdv1.Config{
		Kind:       "Config",
		APIVersion: "v1",
		Clusters: []clientcmdv1.NamedCluster{{Name: "concord", Cluster: clientcmdv1.Cluster{
			Server: server, CertificateAuthorityData: auth.caData,
		}}},
		AuthInfos: []clientcmdv1.NamedAuthInfo{{Name: "concord", AuthInfo: clientcmdv1.AuthInfo{
			ClientCertificateData: auth.certData, ClientKeyData: auth.keyData,
		}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: "concord", Context: clientcmdv1.Context{Cluster: "concord", AuthInfo: "concord", Namespace: "default"}}},
		CurrentContext: "concord",
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("write kubeconfig: %w", err), os.Remove(tmp))
	}
	return nil
}
