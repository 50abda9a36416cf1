package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStoreErrorUnavailable: what etcd says when it cannot serve now is
// ErrUnavailable; other errors keep their meaning.
func TestStoreErrorUnavailable(t *testing.T) {
	tests := []struct {
		name            string
		err             error
		wantUnavailable bool
		wantIs          error
	}{
		{"no leader", rpctypes.ErrNoLeader, true, rpctypes.ErrNoLeader},
		{"no leader (gRPC form)", rpctypes.ErrGRPCNoLeader, true, nil},
		{"leader changed", rpctypes.ErrLeaderChanged, true, rpctypes.ErrLeaderChanged},
		{"server stopped", rpctypes.ErrStopped, true, nil},
		{"etcd's own request timeout", rpctypes.ErrTimeout, true, nil},
		{"timeout: leader failed", rpctypes.ErrTimeoutDueToLeaderFail, true, nil},
		{"gRPC Unavailable", status.Error(codes.Unavailable, "connection refused"), true, nil},
		{"wrapped gRPC Unavailable", fmt.Errorf("dial: %w", status.Error(codes.Unavailable, "connection refused")), true, nil},
		{"deadline", context.DeadlineExceeded, false, context.DeadlineExceeded},
		{"compacted", rpctypes.ErrCompacted, false, ErrCompacted},
		{"request too large", rpctypes.ErrRequestTooLarge, false, ErrTooLarge},
		{"request too large (gRPC form)", rpctypes.ErrGRPCRequestTooLarge, false, ErrTooLarge},
		{"larger than the client sends", status.Error(codes.ResourceExhausted, "trying to send message larger than max (2200000 vs. 2097152)"), false, ErrTooLarge},
		{"other", errors.New("boom"), false, nil},
	}
	for _, tc := range tests {
		got := storeError("get", "/registry/configmaps/a", tc.err)
		if errors.Is(got, ErrUnavailable) != tc.wantUnavailable {
			t.Errorf("%s: storeError(%v) = %v; ErrUnavailable %v, want %v", tc.name, tc.err, got, !tc.wantUnavailable, tc.wantUnavailable)
		}
		if tc.wantIs != nil && !errors.Is(got, tc.wantIs) {
			t.Errorf("%s: storeError(%v) = %v; want it to wrap %v", tc.name, tc.err, got, tc.wantIs)
		}
	}
}

// TestWriteErrorOutcome: a write's error is an unknown outcome unless it
// proves etcd refused the write before applying it; either way the cause
// keeps its meaning.
func TestWriteErrorOutcome(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantUnknown bool
		wantIs      error
	}{
		// The write may have been committed.
		{"deadline", context.DeadlineExceeded, true, context.DeadlineExceeded},
		{"canceled", context.Canceled, true, context.Canceled},
		{"connection lost (EOF)", status.Error(codes.Unavailable, "error reading from server: EOF"), true, ErrUnavailable},
		{"wrapped connection lost", fmt.Errorf("txn: %w", status.Error(codes.Unavailable, "transport is closing")), true, ErrUnavailable},
		{"etcd's own request timeout", rpctypes.ErrTimeout, true, ErrUnavailable},
		{"timeout: leader failed", rpctypes.ErrTimeoutDueToLeaderFail, true, ErrUnavailable},
		{"timeout: connection lost", rpctypes.ErrTimeoutDueToConnectionLost, true, ErrUnavailable},
		{"leader changed", rpctypes.ErrLeaderChanged, true, ErrUnavailable},
		{"server stopped", rpctypes.ErrStopped, true, ErrUnavailable},
		{"gRPC deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true, nil},
		{"unknown error", errors.New("boom"), true, nil},
		{"internal", status.Error(codes.Internal, "stream terminated"), true, nil},
		// Refused before it was applied.
		{"no leader", rpctypes.ErrNoLeader, false, ErrUnavailable},
		{"no leader (gRPC form)", rpctypes.ErrGRPCNoLeader, false, ErrUnavailable},
		{"not capable", rpctypes.ErrNotCapable, false, nil},
		{"too many requests", rpctypes.ErrTooManyRequests, false, nil},
		{"request too large", rpctypes.ErrRequestTooLarge, false, ErrTooLarge},
		{"larger than the client sends", status.Error(codes.ResourceExhausted, "trying to send message larger than max (2200000 vs. 2097152)"), false, ErrTooLarge},
		{"no space", rpctypes.ErrNoSpace, false, nil},
		{"lease not found", rpctypes.ErrLeaseNotFound, false, nil},
		{"lease not found (gRPC form)", rpctypes.ErrGRPCLeaseNotFound, false, nil},
		{"permission denied", rpctypes.ErrPermissionDenied, false, nil},
		{"invalid argument", status.Error(codes.InvalidArgument, "etcdserver: duplicate key given in txn request"), false, nil},
	}
	for _, tc := range tests {
		got := writeError("update", "/registry/configmaps/default/a", tc.err)
		if errors.Is(got, ErrUnknownOutcome) != tc.wantUnknown {
			t.Errorf("%s: writeError(%v) = %v; ErrUnknownOutcome %v, want %v", tc.name, tc.err, got, !tc.wantUnknown, tc.wantUnknown)
		}
		if tc.wantIs != nil && !errors.Is(got, tc.wantIs) {
			t.Errorf("%s: writeError(%v) = %v; want it to wrap %v", tc.name, tc.err, got, tc.wantIs)
		}
	}
}
