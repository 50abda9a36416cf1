package filters

import (
	"context"
	"maps"
	"sync"
)

// AuditAnnotations are what a request's admission adds to its audit line,
// as kube's audit events carry them: a policy's auditAnnotations, the
// failures of a binding with validationActions Audit, a webhook's
// annotations. The first value of a key stands, as in kube.
type AuditAnnotations struct {
	mu sync.Mutex
	m  map[string]string
}

type auditAnnotationsKey struct{}

// WithAuditAnnotations returns ctx for one request, and the annotations
// its admission will add.
func WithAuditAnnotations(ctx context.Context) (context.Context, *AuditAnnotations) {
	a := &AuditAnnotations{}
	return context.WithValue(ctx, auditAnnotationsKey{}, a), a
}

// AddAuditAnnotation adds key=value to the audit line of ctx's request.
func AddAuditAnnotation(ctx context.Context, key, value string) {
	a, _ := ctx.Value(auditAnnotationsKey{}).(*AuditAnnotations)
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]string{}
	}
	if _, ok := a.m[key]; !ok {
		a.m[key] = value
	}
}

// Map returns a copy of the annotations (empty, never nil).
func (a *AuditAnnotations) Map() map[string]string {
	if a == nil {
		return map[string]string{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m := maps.Clone(a.m)
	if m == nil {
		m = map[string]string{}
	}
	return m
}
