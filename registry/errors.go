package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
)

// OptimisticLockErrorMsg is kube-apiserver's message for a stale write.
const OptimisticLockErrorMsg = "the object has been modified; please apply your changes to the latest version and try again"

// Reasons Concord adds to metav1's for HTTP preconditions (CONTRACT.md).
const (
	StatusReasonPreconditionRequired metav1.StatusReason = "PreconditionRequired"
	StatusReasonPreconditionFailed   metav1.StatusReason = "PreconditionFailed"
)

// toStatus is the one place where storage errors become Status errors.
// Errors it does not know are returned as they are: the HTTP layer logs them
// and answers 500 without their text.
func toStatus(err error, gr schema.GroupResource, name string) error {
	switch {
	case errors.Is(err, etcdstore.ErrNotFound), errors.Is(err, etcdstore.ErrInvalidKey):
		// A key that cannot exist (a name like "..") is simply not found.
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, etcdstore.ErrExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, etcdstore.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
	case errors.Is(err, context.DeadlineExceeded):
		// The store's --etcd-request-timeout or the request's own deadline.
		return apierrors.NewTimeoutError(fmt.Sprintf("request did not complete within the allowed time (storage: %v)", gr), RetryAfterSeconds)
	case errors.Is(err, etcdstore.ErrUnavailable):
		return newServiceUnavailable(fmt.Sprintf("storage is unavailable, retry later (storage: %v)", gr))
	}
	return err
}

// RetryAfterSeconds is what a client is told to wait before retrying when
// etcd is unavailable or slow: Status details.retryAfterSeconds, which the
// HTTP layer also sends as the Retry-After header.
const RetryAfterSeconds = 1

// newServiceUnavailable is 503 ServiceUnavailable with retryAfterSeconds
// (apierrors.NewServiceUnavailable has none).
func newServiceUnavailable(message string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: message,
		Details: &metav1.StatusDetails{RetryAfterSeconds: RetryAfterSeconds},
	}}
}

func newPreconditionFailed(gr schema.GroupResource, name, header, current string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusPreconditionFailed,
		Reason: StatusReasonPreconditionFailed,
		Message: fmt.Sprintf("%s %q: the %s precondition does not hold: the object is at resourceVersion %s (ETag \"%s\"); nothing was written: read it again and retry",
			gr, name, header, current, current),
		Details: &metav1.StatusDetails{Name: name, Group: gr.Group, Kind: gr.Resource},
	}}
}

func newPreconditionRequired(message string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusPreconditionRequired,
		Reason:  StatusReasonPreconditionRequired,
		Message: message,
	}}
}
