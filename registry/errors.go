package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

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
	case errors.Is(err, etcdstore.ErrUnknownOutcome):
		// Before the causes below: an unknown outcome may be a deadline or
		// an unavailable etcd too, but it must not be retried blindly.
		return newOutcomeUnknown(gr, name, err)
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

// outcomeUnknownError is the Status of a write that etcd may or may not have
// applied. The write loops return it as it is: deciding again from a
// re-read could find the write's own result and call it a conflict (409) or
// the object gone (404), and a client that then retries applies it twice.
type outcomeUnknownError struct{ *apierrors.StatusError }

// isOutcomeUnknown reports whether err is a write's unknown outcome.
func isOutcomeUnknown(err error) bool {
	var e outcomeUnknownError
	return errors.As(err, &e)
}

// newOutcomeUnknown is 504 Timeout, as kube-apiserver answers a storage call
// that timed out, but without retryAfterSeconds: client-go re-sends any 5xx
// that carries Retry-After, and a re-sent write that was applied meets its
// own result (409, 404, AlreadyExists).
func newOutcomeUnknown(gr schema.GroupResource, name string, cause error) outcomeUnknownError {
	why := "etcd did not answer in time"
	if errors.Is(cause, etcdstore.ErrUnavailable) {
		why = "the connection to etcd was lost or etcd lost its leader"
	}
	what := gr.String()
	if name != "" {
		what = fmt.Sprintf("%s %q", gr, name)
	}
	return outcomeUnknownError{&apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusGatewayTimeout,
		Reason: metav1.StatusReasonTimeout,
		Message: fmt.Sprintf("%s: the outcome of the write is unknown: %s after the write was sent, so it may or may not have been applied; read the object again before retrying",
			what, why),
		Details: &metav1.StatusDetails{Name: name, Group: gr.Group, Kind: gr.Resource},
	}}}
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

// applyStatus is the Status of a server-side apply the field manager
// refused. Its conflicts (409, a cause per field), wrong kinds and versions
// (400) are Statuses already; an applied object its types refuse (a field
// they do not declare, a value of another type) is the client's, a 400 —
// kube 1.37 answers it 500 with the same message.
func applyStatus(err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return err
	}
	if strings.HasPrefix(err.Error(), "failed to create typed patch object") {
		return apierrors.NewBadRequest(err.Error())
	}
	return err
}
