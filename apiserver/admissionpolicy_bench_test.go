package apiserver_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAdmissionPolicies creates 1 KiB ConfigMaps (16 parallel
// writers) with no admission policy, with one bound validating policy of
// two expressions that every ConfigMap passes, and with 100 bound policies
// that match none of them (they select Secrets), in one run so that the
// ratios compare like with like. cpu-µs/op is the process's CPU time (the
// server and its embedded etcd) per write:
//
//	go test ./apiserver/ -run '^$' -bench 'BenchmarkAdmissionPolicies' -benchtime 5s
func BenchmarkAdmissionPolicies(b *testing.B) {
	s := startServer(b)
	c := benchClient()
	var seq atomic.Int64
	create := func(b *testing.B) {
		start := cpuTime()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				name := "p-" + strconv.FormatInt(seq.Add(1), 10)
				benchDo(b, c, http.MethodPost, s.URL+nsPath, `{"metadata":{"name":"`+name+`"},"data":{"v":"`+benchValue+`"}}`)
			}
		})
		b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
	policy := func(name, resource string) {
		benchDo(b, c, http.MethodPost, s.URL+"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", fmt.Sprintf(`{
			"metadata":{"name":%q},
			"spec":{"failurePolicy":"Fail","matchConstraints":{"namespaceSelector":{},"objectSelector":{},"matchPolicy":"Equivalent",
				"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE","UPDATE"],"resources":[%q],"scope":"*"}]},
			"validations":[{"expression":"!has(object.data) || size(object.data) <= 8","message":"too many keys"},
				{"expression":"object.metadata.name.startsWith('p-')","message":"bad name"}]}}`, name, resource))
		benchDo(b, c, http.MethodPost, s.URL+"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", fmt.Sprintf(`{
			"metadata":{"name":%q},"spec":{"policyName":%q,"validationActions":["Deny"]}}`, name, name))
	}
	deletePolicies := func() {
		for _, r := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
			benchDo(b, c, http.MethodDelete, s.URL+"/apis/admissionregistration.k8s.io/v1/"+r, "")
		}
	}
	b.Run("none", create)
	policy("one", "configmaps")
	b.Run("one-bound-policy", create)
	deletePolicies()
	for i := range 100 {
		policy("secrets-"+strconv.Itoa(i), "secrets")
	}
	b.Run("100-policies-not-matching", create)
	deletePolicies()
	b.Run("none-again", create)
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
