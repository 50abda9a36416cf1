package etcdstore

import "errors"

// Errors returned by Store. Callers test them with errors.Is; the registry
// turns them into Kubernetes Status errors in one place.
var (
	// ErrNotFound: the key does not exist (at the revision read).
	ErrNotFound = errors.New("etcdstore: key not found")
	// ErrExists: a create found the key already present.
	ErrExists = errors.New("etcdstore: key already exists")
	// ErrConflict: a conditional write or delete found a different ModRevision.
	ErrConflict = errors.New("etcdstore: revision conflict")
	// ErrGuardChanged: a write's guard key (Guard) was written since its
	// revision; the write was not applied. It comes wrapped with
	// ErrConflict.
	ErrGuardChanged = errors.New("etcdstore: a guard's key changed")
	// ErrCompacted: the revision asked for has been compacted away.
	ErrCompacted = errors.New("etcdstore: revision compacted")
	// ErrFutureRevision: the revision asked for is newer than the store's.
	ErrFutureRevision = errors.New("etcdstore: revision is in the future")
	// ErrUnavailable: etcd cannot serve the request now (no leader, leader
	// changed, member stopping, unreachable); retrying later may succeed.
	ErrUnavailable = errors.New("etcdstore: etcd is unavailable")
	// ErrUnknownOutcome: a write was sent and etcd did not say whether it
	// applied it (deadline, lost connection, lost leader). It may have been
	// committed; only a new read tells, and even that cannot tell a
	// client's own write from another client's identical one. It wraps
	// the cause too (ErrUnavailable, context.DeadlineExceeded, ...).
	ErrUnknownOutcome = errors.New("etcdstore: the write's outcome is unknown")
	// ErrInvalidKey: a key segment is empty, ".", ".." or contains "/".
	ErrInvalidKey = errors.New("etcdstore: invalid key segment")
	// ErrTooLarge: the write is larger than etcd takes (its request
	// limit, or the client's message limit); it was not applied.
	ErrTooLarge = errors.New("etcdstore: the request is too large")
)
