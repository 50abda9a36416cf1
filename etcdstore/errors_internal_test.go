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
		{"request too large", rpctypes.ErrRequestTooLarge, false, nil},
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
