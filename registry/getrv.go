package registry

import (
	"context"
	"time"
)

// resourceVersionWait is how long a read at resourceVersion N waits for
// etcd to reach N before it answers Too large resource version, as
// kube-apiserver's watch cache waits (blockTimeout).
const resourceVersionWait = 3 * time.Second

// resourceVersionPoll is how often that wait reads etcd's revision.
const resourceVersionPoll = 100 * time.Millisecond

// AwaitResourceVersion makes a GET's resourceVersion hold as kube-apiserver's
// does: "" and "0" ask nothing (the read that follows is linearizable
// anyway); N asks for a state at least as new as N, so it returns once
// etcd's revision is N or later — a read that starts afterwards sees at
// least that — and answers 504 Too large resource version (Retry-After 1)
// when etcd has not reached N within resourceVersionWait. A malformed
// value is 400.
func (s *Store) AwaitResourceVersion(ctx context.Context, resourceVersion string) error {
	want, err := parseResourceVersion(resourceVersion)
	if err != nil || want == 0 {
		return err
	}
	deadline := time.Now().Add(resourceVersionWait)
	for {
		// Each poll reads etcd again: not the request's first revision.
		current, err := s.revisions.readShared(ctx)
		if err != nil {
			return StatusError(err, s.Resource.GroupResource(), "")
		}
		if current >= want {
			return nil
		}
		if time.Now().Add(resourceVersionPoll).After(deadline) {
			return StatusError(&resourceVersionTooLargeError{want: want, current: current}, s.Resource.GroupResource(), "")
		}
		select {
		case <-ctx.Done():
			return StatusError(ctx.Err(), s.Resource.GroupResource(), "")
		case <-time.After(resourceVersionPoll):
		}
	}
}
