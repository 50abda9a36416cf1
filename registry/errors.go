package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
)

// OptimisticLockErrorMsg is kube-apiserver's message for a stale write.
const OptimisticLockErrorMsg = "the object has been modified; please apply your changes to the latest version and try again"

// Reasons Concord adds to metav1's for HTTP preconditions (docs/api.md,
// "HTTP conditional requests").
const (
	StatusReasonPreconditionRequired metav1.StatusReason = "PreconditionRequired"
	StatusReasonPreconditionFailed   metav1.StatusReason = "PreconditionFailed"
)

// Messages of kube-apiserver for a list or watch from a compacted revision.
const (
	continueExpiredMsg = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
	listExpiredMsg     = "The resourceVersion for the provided list is too old."
	watchExpiredMsg    = "The resourceVersion for the provided watch is too old."
)

// StatusError is the one place where storage errors become Status errors,
// for every layer: etcdstore's errors, and what registry adds to them to
// say what the Status needs — a list's page (listError), the end of a
// watch's stream (watchEndedError), a resourceVersion etcd has not reached
// (resourceVersionTooLargeError), a write to send again (RetryError),
// watches stopped for shutdown (errWatchStopped). gr and name are the
// resource and object the Status names (name may be empty). Errors it does
// not know are returned as they are: the HTTP layer logs them and answers
// 500 without their text.
func StatusError(err error, gr schema.GroupResource, name string) error {
	var (
		list     *listError
		ended    *watchEndedError
		tooLarge *resourceVersionTooLargeError
		retry    *RetryError
	)
	switch {
	case errors.As(err, &ended):
		// The stream already started: its end is an ERROR event, whatever
		// the cause, so that the client watches again.
		if errors.Is(err, etcdstore.ErrCompacted) {
			return apierrors.NewResourceExpired(watchExpiredMsg)
		}
		return apierrors.NewInternalError(errors.New("the watch of the store failed; watch again"))
	case errors.As(err, &list) && errors.Is(err, etcdstore.ErrCompacted):
		if list.continueFrom == "" {
			return apierrors.NewResourceExpired(listExpiredMsg)
		}
		st := apierrors.NewResourceExpired(continueExpiredMsg)
		st.ErrStatus.ListMeta.Continue = list.continueFrom
		return st
	case errors.As(err, &tooLarge):
		st := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", tooLarge.want, tooLarge.current), RetryAfterSeconds)
		st.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
		return st
	case errors.As(err, &retry):
		return newServiceUnavailable(retry.Message)
	case errors.Is(err, errWatchStopped):
		return newServiceUnavailable("the server is shutting down; watch again on another replica")
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

// listError is a storage error of reading a list's page; continueFrom is
// the token to go on from when the list continued one (opts.Continue): a
// compacted revision then answers 410 with it, as kube-apiserver does.
type listError struct {
	err          error
	continueFrom string
}

func (e *listError) Error() string { return e.err.Error() }
func (e *listError) Unwrap() error { return e.err }

// watchEndedError is the error that ended the stream of a watch read from
// etcd directly: the watch's last event is an ERROR of its Status.
type watchEndedError struct{ err error }

func (e *watchEndedError) Error() string { return e.err.Error() }
func (e *watchEndedError) Unwrap() error { return e.err }

// resourceVersionTooLargeError: a read asked for resourceVersion want, and
// etcd is at current — 504 with kube's cause, retried after a second.
type resourceVersionTooLargeError struct{ want, current int64 }

func (e *resourceVersionTooLargeError) Error() string {
	return fmt.Sprintf("registry: resourceVersion %d is newer than the store's %d", e.want, e.current)
}

// RetryError is a write refused before etcd applied it because what it was
// decided on kept changing (the RBAC roles and bindings, a CRD): 503 with
// retryAfterSeconds, so that the client sends it again. Message says what
// changed and that nothing was written.
type RetryError struct{ Message string }

func (e *RetryError) Error() string { return e.Message }

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

// applyStatus is the Status of a server-side apply of applied that the
// field manager refused with err. Its conflicts (409, a cause per field),
// wrong kinds and versions (400) are Statuses already; an applied object
// its types refuse (a field they do not declare, a value of another type)
// is the client's, a 400 — kube 1.37 answers it 500 with the same message.
// The field manager's error for it is text alone, so the types are asked
// about applied again, once it failed.
func (s *Store) applyStatus(err error, applied runtime.Object) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return err
	}
	fields, ferr := s.fields()
	if ferr != nil {
		return err
	}
	if _, terr := fields.types.ObjectToTyped(applied); terr != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return err
}
