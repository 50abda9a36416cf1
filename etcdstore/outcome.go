package etcdstore

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// writeError wraps the error of a write request (a create, update or
// delete transaction). A write that reached etcd may have been committed
// although its answer was an error: the deadline passed, the connection
// was lost, or the member lost its leader after proposing it. So unless the
// error proves that etcd refused the write before applying it, it also
// wraps ErrUnknownOutcome, and no caller may answer as if nothing was
// written.
func writeError(op, key string, err error) error {
	wrapped := storeError(op, key, err)
	if refusedBeforeApply(err) {
		return wrapped
	}
	return fmt.Errorf("%w: %w", ErrUnknownOutcome, wrapped)
}

// refusedBeforeApply reports whether err proves a write was not applied:
// etcd checked and refused it before proposing it to raft. Everything else
// — deadlines, cancellations, lost connections, "request timed out",
// "leader changed", "server stopped" — leaves the outcome open.
func refusedBeforeApply(err error) bool {
	for _, refused := range []error{
		rpctypes.ErrNoLeader,        // WithRequireLeader: refused by the member's interceptor
		rpctypes.ErrNotCapable,      // refused by the member's capability check
		rpctypes.ErrTooManyRequests, // refused before the proposal: the applied index lags too far
		rpctypes.ErrRequestTooLarge,
		rpctypes.ErrNoSpace,       // the space alarm refuses every write
		rpctypes.ErrLeaseNotFound, // the whole request is refused
	} {
		// The gRPC form carries the same description.
		if errors.Is(err, refused) || rpctypes.ErrorDesc(err) == refused.Error() {
			return true
		}
	}
	// Answers of the applier and the request checks: the request was
	// examined and refused as a whole.
	code := status.Code(err)
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		code = etcdErr.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted:
		return true
	}
	return false
}
