package registry

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// UnconditionalUpdate says which replaces may come without a version — no
// metadata.resourceVersion and no If-Match — (--unconditional-update).
// Concord's rule is that a replace says which version it replaces (428
// otherwise), so that no update is lost; Helm 3 cannot send one, and guards
// its release records with its own lock (their pending-* status) instead.
//
// An allowed unconditional replace is done as kube-apiserver does it: read
// the current revision, then one etcd transaction guarded by it; a
// transaction that another write beat reads again and replaces that.
type UnconditionalUpdate int

const (
	// UnconditionalHelmReleases (the default) allows them for Helm's
	// release records only: Secrets of type helm.sh/release.v1, and
	// ConfigMaps and Secrets labelled owner=helm, as sent and as stored.
	UnconditionalHelmReleases UnconditionalUpdate = iota
	// UnconditionalNone allows none.
	UnconditionalNone
	// UnconditionalKube allows what kube-apiserver allows: any object of a
	// resource declared AllowUnconditionalUpdate (ConfigMaps, Secrets,
	// Namespaces; not Leases).
	UnconditionalKube
)

var unconditionalUpdateNames = [...]string{
	UnconditionalHelmReleases: "helm-releases",
	UnconditionalNone:         "none",
	UnconditionalKube:         "kube",
}

// String is the mode as the flag spells it.
func (m UnconditionalUpdate) String() string {
	if m < 0 || int(m) >= len(unconditionalUpdateNames) {
		return fmt.Sprintf("UnconditionalUpdate(%d)", int(m))
	}
	return unconditionalUpdateNames[m]
}

// ParseUnconditionalUpdate reads a mode as the flag spells it.
func ParseUnconditionalUpdate(s string) (UnconditionalUpdate, error) {
	for m, name := range unconditionalUpdateNames {
		if s == name {
			return UnconditionalUpdate(m), nil
		}
	}
	return 0, fmt.Errorf("registry: unconditional update mode %q is not one of helm-releases, none, kube", s)
}

// WithUnconditionalUpdate sets which replaces may come without a version;
// the default is UnconditionalHelmReleases.
func WithUnconditionalUpdate(m UnconditionalUpdate) StoreOption {
	return func(s *Store) { s.unconditional = m }
}

// allows reports whether a replace of obj in res may come without a
// version. Update asks it of the object sent, before any etcd call, and of
// the object stored, which the replace is about to overwrite.
func (m UnconditionalUpdate) allows(res *Resource, obj Object) bool {
	switch m {
	case UnconditionalKube:
		return res.AllowUnconditionalUpdate
	case UnconditionalHelmReleases:
		return res.AllowUnconditionalUpdate && isHelmRelease(obj)
	}
	return false
}

// helmReleaseSecretType is the type of the Secrets Helm 3's secret driver
// stores releases in; Helm's drivers also label every record owner=helm.
const helmReleaseSecretType corev1.SecretType = "helm.sh/release.v1"

// isHelmRelease reports whether obj is one of Helm 3's release records: a
// Secret of type helm.sh/release.v1, or a ConfigMap or Secret labelled
// owner=helm (the configmap and secret storage drivers).
func isHelmRelease(obj Object) bool {
	switch o := obj.(type) {
	case *corev1.Secret:
		return o.Type == helmReleaseSecretType || o.Labels["owner"] == "helm"
	case *corev1.ConfigMap:
		return o.Labels["owner"] == "helm"
	}
	return false
}

// versionRequired is the 428 of a replace without a version that m does
// not allow; stored is the object it would overwrite, when it was read.
func (s *Store) versionRequired(obj, stored Object) error {
	msg := fmt.Sprintf("%s %q: an update must say which version it replaces: send metadata.resourceVersion from the object you read, or an If-Match header with its ETag",
		s.Resource.GroupResource(), obj.GetName())
	switch {
	case stored != nil:
		// The object sent is a Helm release record, the stored one is not.
		msg += "; the stored object is not a Helm release record, so it is not replaced without one"
	case s.unconditional == UnconditionalNone && UnconditionalHelmReleases.allows(s.Resource, obj):
		msg += fmt.Sprintf(" (Helm sends neither for its release records: start the server with --unconditional-update=%s to accept them)", UnconditionalHelmReleases)
	}
	return newPreconditionRequired(msg)
}

// versionRequiredOf answers a replace of namespace/name without a version
// that m does not allow: 404 when the object does not exist and
// missingIsNotFound (kube's registry finds the object missing before it
// asks for a version, where its strategy does not create on update), else
// the 428.
func (s *Store) versionRequiredOf(ctx context.Context, namespace, name string, obj Object, missingIsNotFound bool) error {
	if missingIsNotFound {
		if _, _, err := s.read(ctx, namespace, name); err != nil {
			return StatusError(err, s.Resource.GroupResource(), name)
		}
	}
	return s.versionRequired(obj, nil)
}

// UnconditionalReplace is a replace without a version that the store
// accepted and carried out.
type UnconditionalReplace struct {
	Resource *Resource
	// Key is the object's etcd key; ResourceVersion what it is now.
	Key             string
	ResourceVersion string
}

// OnUnconditionalUpdate has report called for every replace without a
// version that the store carried out (not for dry runs), with the context
// of the request, so that the server logs and counts it. Set it before
// serving.
func (s *Store) OnUnconditionalUpdate(report func(ctx context.Context, u UnconditionalReplace)) {
	s.unconditionalReport = report
}

// updateUnconditionally replaces namespace/name with obj whatever version is
// stored, as kube-apiserver does: each attempt of the replace loop stamps
// obj with the revision it read, so the write is one transaction guarded by
// it, and a transaction another write beat reads again (errRaced). The
// stored object must be one m allows too.
func (s *Store) updateUnconditionally(ctx context.Context, namespace, name string, obj Object, conds WriteOptions) (Object, bool, error) {
	out, created, err := s.replace(ctx, namespace, name, conds, func(old Object) (Object, error) {
		if !s.unconditional.allows(s.Resource, old) {
			return nil, s.versionRequired(obj, old)
		}
		next := copyObject(obj)
		next.SetResourceVersion(old.GetResourceVersion())
		return next, nil
	})
	if err == nil && !conds.DryRun && s.unconditionalReport != nil {
		s.unconditionalReport(ctx, UnconditionalReplace{
			Resource: s.Resource, Key: s.etcdKey(s.keyOf(namespace, name)), ResourceVersion: out.GetResourceVersion(),
		})
	}
	return out, created, err
}
