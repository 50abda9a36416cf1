package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
)

// TestStatusError: every storage error, as etcdstore returns it (wrapped
// with its operation and key) or as registry adds to it for a list, a
// watch or a write to send again, becomes exactly the Status kube-apiserver
// answers; errors it does not know come back as they are.
func TestStatusError(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	wrapped := func(sentinel error) error { return fmt.Errorf("get /registry/deployments/ns/a: %w: cause", sentinel) }
	failure := func(code int32, reason metav1.StatusReason, message string, details *metav1.StatusDetails) *metav1.Status {
		return &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message, Details: details}
	}
	object := &metav1.StatusDetails{Group: "apps", Kind: "deployments", Name: "a"}
	retry := &metav1.StatusDetails{RetryAfterSeconds: 1}
	tooLarge := &metav1.StatusDetails{RetryAfterSeconds: 1, Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}}
	unknown := `deployments.apps "a": the outcome of the write is unknown: %s after the write was sent, so it may or may not have been applied; read the object again before retrying`
	expiredContinue := failure(410, metav1.StatusReasonExpired, continueExpiredMsg, nil)
	expiredContinue.ListMeta.Continue = "token"
	tooOld, notOld := wrapped(etcdstore.ErrCompacted), wrapped(etcdstore.ErrUnavailable)
	tests := []struct {
		name string
		err  error
		want *metav1.Status // nil: err comes back as it is
	}{
		{"not found", wrapped(etcdstore.ErrNotFound), failure(404, metav1.StatusReasonNotFound, `deployments.apps "a" not found`, object)},
		{"invalid key", wrapped(etcdstore.ErrInvalidKey), failure(404, metav1.StatusReasonNotFound, `deployments.apps "a" not found`, object)},
		{"exists", wrapped(etcdstore.ErrExists), failure(409, metav1.StatusReasonAlreadyExists, `deployments.apps "a" already exists`, object)},
		{"conflict", wrapped(etcdstore.ErrConflict), failure(409, metav1.StatusReasonConflict, `Operation cannot be fulfilled on deployments.apps "a": `+OptimisticLockErrorMsg, object)},
		{"guard changed", fmt.Errorf("%w: %w", etcdstore.ErrConflict, etcdstore.ErrGuardChanged), failure(409, metav1.StatusReasonConflict, `Operation cannot be fulfilled on deployments.apps "a": `+OptimisticLockErrorMsg, object)},
		{"unknown outcome, deadline", fmt.Errorf("%w: %w", etcdstore.ErrUnknownOutcome, context.DeadlineExceeded), failure(504, metav1.StatusReasonTimeout, fmt.Sprintf(unknown, "etcd did not answer in time"), object)},
		{"unknown outcome, unavailable", fmt.Errorf("%w: %w", etcdstore.ErrUnknownOutcome, etcdstore.ErrUnavailable), failure(504, metav1.StatusReasonTimeout, fmt.Sprintf(unknown, "the connection to etcd was lost or etcd lost its leader"), object)},
		{"deadline", wrapped(context.DeadlineExceeded), failure(504, metav1.StatusReasonTimeout, "Timeout: request did not complete within the allowed time (storage: deployments.apps)", retry)},
		{"unavailable", wrapped(etcdstore.ErrUnavailable), failure(503, metav1.StatusReasonServiceUnavailable, "storage is unavailable, retry later (storage: deployments.apps)", retry)},
		{"too large: the store's to handle, a 500", wrapped(etcdstore.ErrTooLarge), nil},
		{"compacted outside a list or watch", tooOld, nil},
		{"future revision outside a list", wrapped(etcdstore.ErrFutureRevision), nil},
		{"list compacted", &listError{err: tooOld}, failure(410, metav1.StatusReasonExpired, "The resourceVersion for the provided list is too old.", nil)},
		{"list continue compacted", &listError{err: tooOld, continueFrom: "token"}, expiredContinue},
		{"list unavailable", &listError{err: notOld, continueFrom: "token"}, failure(503, metav1.StatusReasonServiceUnavailable, "storage is unavailable, retry later (storage: deployments.apps)", retry)},
		{"resourceVersion too large", &resourceVersionTooLargeError{want: 9, current: 7}, failure(504, metav1.StatusReasonTimeout, "Timeout: Too large resource version: 9, current: 7", tooLarge)},
		{"watch from a compacted revision", &watchEndedError{tooOld}, failure(410, metav1.StatusReasonExpired, "The resourceVersion for the provided watch is too old.", nil)},
		{"watch failed", &watchEndedError{notOld}, failure(500, metav1.StatusReasonInternalError, "Internal error occurred: the watch of the store failed; watch again",
			&metav1.StatusDetails{Causes: []metav1.StatusCause{{Message: "the watch of the store failed; watch again"}}})},
		{"watches stopped", fmt.Errorf("start: %w", errWatchStopped), failure(503, metav1.StatusReasonServiceUnavailable, "the server is shutting down; watch again on another replica", retry)},
		{"send again", &RetryError{Message: "it changed; nothing was written: send it again"}, failure(503, metav1.StatusReasonServiceUnavailable, "it changed; nothing was written: send it again", retry)},
		{"unknown", errors.New("something else"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := StatusError(tc.err, gr, "a")
			if tc.want == nil {
				if err != tc.err {
					t.Fatalf("StatusError = %#v; want the error as it is", err)
				}
				return
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("StatusError = %v; want a Status", err)
			}
			got, _ := json.Marshal(status.Status())
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) {
				t.Errorf("StatusError =\n%s\nwant\n%s", got, want)
			}
		})
	}
}
