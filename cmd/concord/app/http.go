package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/apiserver"
)

// buildHandler makes the API's handler, with the ServiceAccount tokens.
func (s *Server) buildHandler(context.Context) error {
	tokenIssuer, tokenAuthn, err := s.saKeys.tokens(s.cfg.ServiceAccounts, s.catalog)
	if err != nil {
		return err
	}
	if tokenAuthn != nil { // not a typed nil in the interface
		s.sec.authn.TokenAuthenticator = tokenAuthn
	}
	var origins []*regexp.Regexp
	for _, o := range s.cfg.CORSAllowedOrigins {
		origins = append(origins, regexp.MustCompile(o)) // checked by Validate
	}
	s.shutdownInitiated = make(chan struct{})
	var crdsSynced <-chan struct{}
	if s.crdServer != nil {
		crdsSynced = s.crdServer.Synced()
	}
	cfg := apiserver.Config{
		Catalog:            s.catalog,
		Logger:             s.log,
		RequestTimeout:     s.cfg.RequestTimeout,
		CORSAllowedOrigins: origins,
		StorageCheck:       s.monitor.Check,
		ShutdownInitiated:  s.shutdownInitiated,
		CRDsSynced:         crdsSynced,
		PostStartHooks:     s.steps.hooks(),
		Metrics:            s.metrics,

		MaxRequestsInFlight:         s.cfg.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight: s.cfg.MaxMutatingRequestsInFlight,
		MaxRequestBytesInFlight:     s.cfg.MaxRequestBytesInFlight,

		Authentication: s.sec.authn,
		Authorizer:     s.sec.authz,
		AuditLog:       s.sec.audit,
		Profiling:      s.cfg.Profiling,
		TokenIssuer:    tokenIssuer,
		OpenIDMetadata: s.saKeys.openIDMetadata(),
	}
	s.opts.handler(&cfg)
	s.handler = apiserver.New(cfg)
	return nil
}

// maxHeaderBytes bounds a request's line and headers (kube-apiserver's
// bound is 1 MiB). net/http holds about two copies of them while it reads
// them, before any handler, in-flight limit or selector limit can look:
// 200 clients sending 880 KB selectors held some 350 MiB that way. Nothing
// Concord serves needs more: selectors are at most 10 KiB, tokens a few.
const maxHeaderBytes = 128 << 10

// buildHTTPServer makes the HTTP server of the handler and writes the
// kubeconfig.
func (s *Server) buildHTTPServer(context.Context) error {
	// A client that sends its headers slowly (or not at all) is cut off
	// after readHeaderTimeout, an idle keep-alive connection after
	// IdleTimeout; headers are at most maxHeaderBytes (431 beyond).
	readHeaderTimeout := s.cfg.ReadHeaderTimeout
	if readHeaderTimeout <= 0 {
		readHeaderTimeout = 32 * time.Second
	}
	s.drain = newDrainer()
	s.srv = &http.Server{
		Handler:           s.drain.handler(s.handler),
		ConnState:         s.drain.connState,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		// No ReadTimeout or WriteTimeout: watches are long-running. Other
		// requests are bounded by --request-timeout inside the handler,
		// including the reading of their body and the writing of their
		// response (apiserver's limits).
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// nil with --insecure-serving; otherwise HTTPS, with HTTP/2.
		TLSConfig: s.sec.tls,
	}
	// Shutdown waits for requests to finish; watches end at once, so their
	// clients reconnect to another replica.
	s.srv.RegisterOnShutdown(func() {
		for _, st := range s.catalog.Stores() {
			st.StopWatches()
		}
	})

	scheme := "https://"
	if s.sec.tls == nil {
		scheme = "http://"
	}
	s.url = scheme + kubeconfigHost(s.ln.Addr().(*net.TCPAddr))
	if s.cfg.WriteKubeconfig != "" {
		return writeKubeconfig(s.cfg.WriteKubeconfig, s.url, s.sec.kubeconfig)
	}
	return nil
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
