package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// benchWidget is a 1 KiB Widget: 16 list-map ports, a note kept by
// x-kubernetes-preserve-unknown-fields, every rule of the schema to check.
func benchWidget(tb testing.TB) *unstructured.Unstructured {
	var ports []string
	for i := range 16 {
		ports = append(ports, fmt.Sprintf(`{"name":"port-%02d","port":%d}`, i, 8000+i))
	}
	return widget(tb, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"ns","labels":{"app":"bench"}},
		"spec":{"size":"small","replicas":3,"maxReplicas":10,"value":"50%","ports":[`+strings.Join(ports, ",")+`],
		"extra":{"note":"`+strings.Repeat("n", 317)+`"}}}`)
}

// benchConfigMap is a 1 KiB ConfigMap: 8 keys of 110 bytes.
func benchConfigMap() *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{"app": "bench"}}, Data: map[string]string{}}
	for i := range 8 {
		cm.Data["key-"+strconv.Itoa(i)] = strings.Repeat("v", 110)
	}
	return cm
}

// benchKind is one resource written by the benchmark: a fresh object
// (named name, its content varied by i) each write.
type benchKind struct {
	name   string
	store  *Store
	object func(name string, i int) Object
}

// gadgetCRD is a CRD whose schema only types its fields: no defaults, list
// types, embedded resources or CEL rules, so of kube's passes only
// pruning, the ObjectMeta round trip and the OpenAPI validation act.
const gadgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: string, enum: [small, large]}
              replicas: {type: integer, minimum: 0}
              maxReplicas: {type: integer}
              value: {x-kubernetes-int-or-string: true}
              ports:
                type: array
                items:
                  type: object
                  properties:
                    name: {type: string}
                    port: {type: integer}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
`

func benchKinds(b *testing.B, f *widgetFixture) []benchKind {
	w, cm := benchWidget(b), benchConfigMap()
	b.Logf("a widget is %d bytes of JSON, a ConfigMap %d", jsonSize(b, w), jsonSize(b, cm))
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(gadgetCRD), crd); err != nil {
		b.Fatal(err)
	}
	gadgets, err := CustomResource(crd, "v1")
	if err != nil {
		b.Fatal(err)
	}
	gadgetStore := NewStore(f.storage, gadgets, DefaultWatchConfig())
	if err := f.catalog.Add(gadgetStore); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(gadgetStore.StopWatches)
	g := w.DeepCopy()
	g.SetKind("Gadget")
	return []benchKind{
		{"configmap", f.configMaps, func(name string, i int) Object {
			c := cm.DeepCopy()
			c.Name = name
			c.Data["key-0"] = strconv.Itoa(i) + c.Data["key-0"][len(strconv.Itoa(i)):]
			return c
		}},
		{"widget", f.v1, func(name string, i int) Object {
			u := w.DeepCopy()
			u.SetName(name)
			u.Object["spec"].(map[string]any)["replicas"] = int64(i % 10)
			return u
		}},
		{"gadget", gadgetStore, func(name string, i int) Object {
			u := g.DeepCopy()
			u.SetName(name)
			u.Object["spec"].(map[string]any)["replicas"] = int64(i % 10)
			return u
		}},
	}
}

func jsonSize(tb testing.TB, obj any) int {
	b, err := json.Marshal(obj)
	if err != nil {
		tb.Fatal(err)
	}
	return len(b)
}

// BenchmarkCustomResourceWrite compares creates and replaces of a 1 KiB
// custom object — a widget, whose schema makes every kube pass act, and a
// gadget, whose schema only types its fields — with those of a 1 KiB
// ConfigMap through the same Store and etcd, one at a time (the latency of
// a write) and from as many goroutines as GOMAXPROCS (the throughput the
// CPU allows).
func BenchmarkCustomResourceWrite(b *testing.B) {
	f := newWidgetFixture(b)
	ctx := context.Background()
	// Names of the objects written, unique across rounds and counts.
	var next atomic.Int64
	for _, k := range benchKinds(b, f) {
		b.Run(k.name+"/create", func(b *testing.B) {
			for b.Loop() {
				i := int(next.Add(1))
				if _, err := k.store.Create(ctx, "ns", k.object("create-"+strconv.Itoa(i), i), WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(k.name+"/update", func(b *testing.B) {
			name := "update-" + strconv.FormatInt(next.Add(1), 10)
			out, err := k.store.Create(ctx, "ns", k.object(name, 0), WriteOptions{})
			if err != nil {
				b.Fatal(err)
			}
			rv, i := out.GetResourceVersion(), 0
			for b.Loop() {
				i++
				obj := k.object(name, i)
				obj.SetResourceVersion(rv)
				out, _, err := k.store.Update(ctx, "ns", name, obj, WriteOptions{})
				if err != nil {
					b.Fatal(err)
				}
				rv = out.GetResourceVersion()
			}
		})
		b.Run(k.name+"/update-parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				name := "parallel-" + strconv.FormatInt(next.Add(1), 10)
				out, err := k.store.Create(ctx, "ns", k.object(name, 0), WriteOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				rv, i := out.GetResourceVersion(), 0
				for pb.Next() {
					i++
					obj := k.object(name, i)
					obj.SetResourceVersion(rv)
					out, _, err := k.store.Update(ctx, "ns", name, obj, WriteOptions{})
					if err != nil {
						b.Error(err)
						return
					}
					rv = out.GetResourceVersion()
				}
			})
		})
	}
}

// BenchmarkCustomResourceStrategy is the CPU a write of the 1 KiB widget
// spends in the Strategy: decoding (ObjectMeta, pruning, defaulting), the
// validation of a create and of a replace (all of kube's: OpenAPI, list
// types, embedded resources, CEL), and their parts: the OpenAPI validation
// by kube's validator and by openAPIChecker, and the CEL rules.
func BenchmarkCustomResourceStrategy(b *testing.B) {
	res := widgetResource(b, "v1")
	s := res.Strategy.(*customResourceStrategy)
	obj := benchWidget(b)
	s.PrepareForCreate(obj)
	obj.SetResourceVersion("7")
	if errs := s.Validate(obj); len(errs) > 0 {
		b.Fatal(errs)
	}
	next := obj.DeepCopy()
	next.Object["spec"].(map[string]any)["replicas"] = int64(4)
	if errs := s.ValidateUpdate(next, obj); len(errs) > 0 {
		b.Fatal(errs)
	}
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.DecodeRequest(next); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("validate-create", func(b *testing.B) {
		for b.Loop() {
			if errs := s.Validate(obj); len(errs) > 0 {
				b.Fatal(errs)
			}
		}
	})
	b.Run("validate-update", func(b *testing.B) {
		for b.Loop() {
			if errs := s.ValidateUpdate(next, obj); len(errs) > 0 {
				b.Fatal(errs)
			}
		}
	})
	b.Run("openapi-kube", func(b *testing.B) {
		for b.Loop() {
			if result := s.validator.Validate(obj.Object); !result.IsValid() {
				b.Fatal(result.Errors)
			}
		}
	})
	b.Run("openapi-checker", func(b *testing.B) {
		for b.Loop() {
			if !s.openapi.accepts(obj.Object) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("cel-only", func(b *testing.B) {
		for b.Loop() {
			if errs, _ := s.cel.Validate(context.TODO(), nil, s.structural, next.Object, obj.Object, celRuntimeCostBudget); len(errs) > 0 {
				b.Fatal(errs)
			}
		}
	})
}
