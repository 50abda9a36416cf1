package apiserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"sync"
	"time"
)

// auditEvent is one line of the audit log: who did what to which object,
// and how it ended. Every field is always there, empty when it does not
// apply (a non-resource request has no resource; a request that could not
// be authenticated has no user).
type auditEvent struct {
	// Time is when the request was received.
	Time time.Time `json:"time"`
	// AuditID is the request's Audit-Id response header.
	AuditID string   `json:"auditID"`
	User    string   `json:"user"`
	Groups  []string `json:"groups"`
	// ImpersonatedUser and ImpersonatedGroups are whom a request with
	// Impersonate-* headers acted as (User and Groups sent it), as kube's
	// audit events.
	ImpersonatedUser   string   `json:"impersonatedUser"`
	ImpersonatedGroups []string `json:"impersonatedGroups"`
	// SourceIP is the client's address as the server saw it (a load
	// balancer's, behind one).
	SourceIP string `json:"sourceIP"`
	// Verb is kube-apiserver's: get, list, watch, create, update, patch,
	// delete, deletecollection; for other paths the lower-case method.
	Verb      string `json:"verb"`
	APIGroup  string `json:"apiGroup"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// URI is the request's path and query.
	URI  string `json:"uri"`
	Code int    `json:"code"`
	// Latency is how long the request took (a watch: how long it was
	// open), as a Go duration ("1.234ms").
	Latency string `json:"latency"`
	// Annotations are what admission added, as kube's audit events'
	// annotations: a policy's auditAnnotations ("<policy>/<key>"), the
	// failures of a binding with validationActions Audit
	// ("validation.policy.admission.k8s.io/validation_failure").
	Annotations map[string]string `json:"annotations"`
}

// auditLog writes one JSON line per API request to its writer. Health
// checks and /metrics are not audited.
type auditLog struct {
	mu     sync.Mutex
	w      io.Writer
	failed bool // the last write failed (logged once until one succeeds)
}

func newAuditLog(w io.Writer) *auditLog {
	if w == nil {
		return nil
	}
	return &auditLog{w: w}
}

// record writes the line of a finished request; a nil log does nothing.
func (l *auditLog) record(r requestSummary, auditID string, info *requestInfo, code int, start time.Time, took time.Duration) {
	if l == nil || info.probe {
		return
	}
	ev := auditEvent{
		Time:               start.UTC(),
		AuditID:            auditID,
		Groups:             []string{},
		ImpersonatedGroups: []string{},
		SourceIP:           remoteIP(r.remoteAddr),
		Verb:               r.method,
		URI:                r.url.RequestURI(),
		Code:               code,
		Latency:            took.Round(time.Microsecond).String(),
		Annotations:        info.auditAnnotations.Map(),
	}
	if a := info.attrs; a != nil {
		ev.Verb, ev.APIGroup, ev.Resource, ev.Namespace, ev.Name = a.Verb, a.APIGroup, a.Resource, a.Namespace, a.Name
		if a.Subresource != "" {
			ev.Resource += "/" + a.Subresource
		}
		ev.User = a.User.Name
		ev.Groups = append(ev.Groups, a.User.Groups...)
		if a.Impersonator != nil {
			ev.User, ev.Groups = a.Impersonator.Name, append(ev.Groups[:0], a.Impersonator.Groups...)
			ev.ImpersonatedUser, ev.ImpersonatedGroups = a.User.Name, append(ev.ImpersonatedGroups, a.User.Groups...)
		}
	}
	var line bytes.Buffer
	enc := json.NewEncoder(&line) // one line, with its newline
	enc.SetEscapeHTML(false)      // keep & in URIs readable
	if err := enc.Encode(ev); err != nil {
		info.logger().Error("audit: encode event", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(line.Bytes()); err != nil {
		if !l.failed {
			info.logger().Error("audit: cannot write the audit log; requests are still served, unaudited, until it can", "err", err)
		}
		l.failed = true
		return
	}
	if l.failed {
		info.logger().Info("audit: writing the audit log again")
	}
	l.failed = false
}

func remoteIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}
