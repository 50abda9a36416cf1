package apiserver

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
)

// kubeAdmissionMetricPrefixes are the metrics kube's admission plugins
// count in component-base's legacy registry: the webhooks'
// (apiserver_admission_webhook_*) and the admission policies'
// (apiserver_validating_admission_policy_*,
// apiserver_mutating_admission_policy_*).
var kubeAdmissionMetricPrefixes = []string{
	"apiserver_admission_webhook_",
	"apiserver_validating_admission_policy_",
	"apiserver_mutating_admission_policy_",
}

// kubeAdmissionMetrics gathers those families, and nothing else of that
// registry (kube's libraries register more there, some under the names of
// Concord's own), for /metrics to serve next to Concord's.
var kubeAdmissionMetrics prometheus.Gatherer = prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	kept := families[:0]
	for _, f := range families {
		for _, prefix := range kubeAdmissionMetricPrefixes {
			if strings.HasPrefix(f.GetName(), prefix) {
				kept = append(kept, f)
				break
			}
		}
	}
	return kept, err
})
