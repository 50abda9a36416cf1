package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
)

// TestToStatusUnavailableAndTimeout: an etcd that cannot answer becomes a
// 503 or 504 Status that tells the client when to retry.
func TestToStatusUnavailableAndTimeout(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name       string
		err        error
		wantCode   int32
		wantReason metav1.StatusReason
	}{
		{"etcd unavailable", fmt.Errorf("get /registry/configmaps/a: %w: no leader", etcdstore.ErrUnavailable), http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable},
		{"deadline", fmt.Errorf("get /registry/configmaps/a: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, metav1.StatusReasonTimeout},
	}
	for _, tc := range tests {
		var status apierrors.APIStatus
		if err := toStatus(tc.err, gr, "a"); !errors.As(err, &status) {
			t.Errorf("%s: toStatus = %v; want a Status", tc.name, err)
			continue
		}
		st := status.Status()
		if st.Code != tc.wantCode || st.Reason != tc.wantReason {
			t.Errorf("%s: toStatus = %d %s; want %d %s", tc.name, st.Code, st.Reason, tc.wantCode, tc.wantReason)
		}
		if st.Details == nil || st.Details.RetryAfterSeconds != RetryAfterSeconds {
			t.Errorf("%s: details %+v; want retryAfterSeconds %d", tc.name, st.Details, RetryAfterSeconds)
		}
	}
}
