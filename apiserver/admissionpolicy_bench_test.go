package apiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAdmissionPolicies replaces 1 KiB ConfigMaps (16 parallel
// writers, each its own ConfigMap, so that etcd's size stays the same from
// one part to the next) with no admission policy, with one bound
// validating policy of two expressions that every ConfigMap passes, and
// with 100 bound policies that match none of them (they select Secrets),
// in one run so that the ratios compare like with like. cpu-µs/op is the process's CPU time (the server and its embedded
// etcd) per write:
//
//	go test ./apiserver/ -run '^$' -bench 'BenchmarkAdmissionPolicies' -benchtime 5s
func BenchmarkAdmissionPolicies(b *testing.B) {
	s := startServer(b)
	c := benchClient()
	var seq atomic.Int64
	write := func(b *testing.B) {
		start := cpuTime()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			name := "p-" + strconv.FormatInt(seq.Add(1), 10)
			var obj struct {
				Metadata struct{ ResourceVersion string } `json:"metadata"`
			}
			body := func(rv string, i int) string {
				return `{"metadata":{"name":"` + name + `","resourceVersion":"` + rv + `"},"data":{"v":"` + fmt.Sprintf("%04d", i%10000) + benchValue[4:] + `"}}`
			}
			if err := json.Unmarshal(benchDo(b, c, http.MethodPost, s.URL+nsPath, `{"metadata":{"name":"`+name+`"},"data":{"v":"`+benchValue+`"}}`), &obj); err != nil {
				b.Fatal(err)
			}
			i := 0
			for pb.Next() {
				i++
				if err := json.Unmarshal(benchDo(b, c, http.MethodPut, s.URL+nsPath+"/"+name, body(obj.Metadata.ResourceVersion, i)), &obj); err != nil {
					b.Fatal(err)
				}
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
	// Three rounds of the three, interleaved: etcd's history grows over
	// the run and slows every write a little; each round's three are
	// next to each other.
	for range 3 {
		b.Run("none", write)
		policy("one", "configmaps")
		b.Run("one-bound-policy", write)
		deletePolicies()
		for i := range 100 {
			policy("secrets-"+strconv.Itoa(i), "secrets")
		}
		b.Run("100-policies-not-matching", write)
		deletePolicies()
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
