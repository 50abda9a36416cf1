package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/etcdstore"
)

// FencedStorage adds to every write made for a request the guard of its
// authorization's fence (filters.Fence: RBAC allowed it on a view that may
// be behind), so that etcd applies it only if the RBAC objects are still as
// that view had them. When a guard failed (a definite refusal: nothing was
// written), the request is decided again on a current view: still allowed,
// the same write is sent again under the new guard (bounded); refused, it
// is answered 403. A write whose outcome is unknown is never sent again.
// It is the storage nearest etcd, under crdserving's guards, so that a
// failure of the fence is handled before theirs.
func FencedStorage(s Storage) Storage { return &fencedStorage{Storage: s} }

type fencedStorage struct{ Storage }

// fenceAttempts bounds how often one write is sent while RBAC keeps changing.
const fenceAttempts = 3

// Prefix is the storage's own (corrupt-object reports name etcd keys).
func (f *fencedStorage) Prefix() string {
	if p, ok := f.Storage.(prefixed); ok {
		return p.Prefix()
	}
	return ""
}

func (f *fencedStorage) Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error) {
	return fencedWrite(ctx, guards, func(g []etcdstore.Guard) (int64, error) { return f.Storage.Create(ctx, ref, value, g...) })
}

func (f *fencedStorage) Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return fencedWrite(ctx, guards, func(g []etcdstore.Guard) (int64, error) { return f.Storage.Update(ctx, ref, value, revision, g...) })
}

func (f *fencedStorage) Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error) {
	return fencedWrite(ctx, guards, func(g []etcdstore.Guard) (int64, error) { return f.Storage.Delete(ctx, ref, revision, g...) })
}

func fencedWrite(ctx context.Context, guards []etcdstore.Guard, send func([]etcdstore.Guard) (int64, error)) (int64, error) {
	fence := filters.FenceOf(ctx)
	if fence == nil {
		return send(guards)
	}
	for attempt := 1; ; attempt++ {
		g, guarded := fence.Guard()
		all := guards
		if guarded {
			all = append(slices.Clip(guards), g)
		}
		rev, err := send(all)
		if err == nil || errors.Is(err, etcdstore.ErrUnknownOutcome) {
			// Landed, or perhaps: the answer is this write's.
			fence.Settle()
			return rev, err
		}
		if !guarded || !errors.Is(err, etcdstore.ErrGuardChanged) {
			return rev, err
		}
		// Some guard failed and nothing was written: decide again on a
		// current view. If the fence's guard is the same, it held: another
		// guard failed (the caller's to handle).
		if derr := fence.Redecide(ctx); derr != nil {
			return 0, derr
		}
		if now, ok := fence.Guard(); ok && now == g {
			return rev, err
		}
		if attempt == fenceAttempts {
			return 0, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
				Message: fmt.Sprintf("the RBAC roles and bindings kept changing while the write was authorized (%d attempts); nothing was written: send it again", attempt),
				Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
			}}
		}
	}
}
