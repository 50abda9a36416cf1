package etcdstore_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/etcdstore/etcdtest"
)

// TestMetricsLaterResources: resources that are not in NewMetrics' map are
// labelled once SetGroup names their group, a custom resource's
// "<group>/<plural>" by its parts, and anything else as the core group.
func TestMetricsLaterResources(t *testing.T) {
	e := etcdtest.Start(t)
	reg := prometheus.NewRegistry()
	metrics, err := etcdstore.NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := etcdstore.NewWithOptions(e.Client, "/registry", etcdstore.Options{Metrics: metrics})
	ctx := testContext(t)
	metrics.SetGroup("leases", "coordination.k8s.io")
	metrics.SetGroup("stable.example.com/crontabs", "stable.example.com")
	for _, resource := range []string{"leases", "stable.example.com/crontabs", "example.com/widgets", "things"} {
		if _, err := s.Count(ctx, resource); err != nil {
			t.Fatalf("Count(%s): %v", resource, err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "etcd_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["group"]+" "+labels["resource"]] = true
		}
	}
	want := map[string]bool{
		"coordination.k8s.io leases":  true,
		"stable.example.com crontabs": true,
		"example.com widgets":         true,
		" things":                     true,
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("count series by group and resource (-got +want):\n%s", diff)
	}
}
