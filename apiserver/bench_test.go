package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The write and read paths end to end (HTTP → decode → registry → one etcd
// transaction → encode) next to the same operation as a bare etcd
// transaction on the same embedded etcd, so the ratio is measured in one
// run:
//
//	go test ./apiserver/ -run '^$' -bench 'BenchmarkPath' -benchtime 3s

var benchValue = strings.Repeat("x", 1024)

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

func benchDo(b *testing.B, c *http.Client, method, url, body string, header ...string) []byte {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode >= 300 {
		b.Fatalf("%s %s: %d %v %s", method, url, resp.StatusCode, err, out)
	}
	return out
}

// BenchmarkPath runs each operation through Concord and as a bare etcd
// transaction, with 16 parallel workers.
func BenchmarkPath(b *testing.B) {
	s := startServer(b)
	c := benchClient()
	cli := s.Etcd.Client
	var seq atomic.Int64
	body := func(name, rv string) string {
		m := map[string]any{"metadata": map[string]string{"name": name}, "data": map[string]string{"v": benchValue}}
		if rv != "" {
			m["metadata"] = map[string]string{"name": name, "resourceVersion": rv}
		}
		out, _ := json.Marshal(m)
		return string(out)
	}
	b.Run("create/concord", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchDo(b, c, http.MethodPost, s.URL+nsPath, body("c-"+strconv.FormatInt(seq.Add(1), 10), ""))
			}
		})
	})
	b.Run("create/etcd", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := "/bench/configmaps/default/e-" + strconv.FormatInt(seq.Add(1), 10)
				if _, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, body("x", ""))).Commit(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("update/concord", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			name := "u-" + strconv.FormatInt(seq.Add(1), 10)
			var obj struct {
				Metadata struct{ ResourceVersion string } `json:"metadata"`
			}
			if err := json.Unmarshal(benchDo(b, c, http.MethodPost, s.URL+nsPath, body(name, "")), &obj); err != nil {
				b.Fatal(err)
			}
			i := 0
			for pb.Next() {
				i++
				out := benchDo(b, c, http.MethodPut, s.URL+nsPath+"/"+name, strings.Replace(body(name, obj.Metadata.ResourceVersion), "xxxx", fmt.Sprintf("%04d", i%10000), 1))
				if err := json.Unmarshal(out, &obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("update/etcd", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			key := "/bench/configmaps/default/ue-" + strconv.FormatInt(seq.Add(1), 10)
			resp, err := cli.Put(context.Background(), key, body("x", ""))
			if err != nil {
				b.Fatal(err)
			}
			rev := resp.Header.Revision
			for pb.Next() {
				tr, err := cli.Txn(context.Background()).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, body("y", ""))).Commit()
				if err != nil || !tr.Succeeded {
					b.Fatal(err)
				}
				rev = tr.Header.Revision
			}
		})
	})
	benchDo(b, c, http.MethodPost, s.URL+nsPath, body("g", ""))
	b.Run("get/concord", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchDo(b, c, http.MethodGet, s.URL+nsPath+"/g", "")
			}
		})
	})
	b.Run("get/concord-protobuf", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchDo(b, c, http.MethodGet, s.URL+nsPath+"/g", "", "Accept", "application/vnd.kubernetes.protobuf")
			}
		})
	})
	b.Run("get/etcd", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cli.Get(context.Background(), "/registry/configmaps/default/g"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkList2000 lists 2,000 1 KiB ConfigMaps: JSON (the pass-through
// path), JSON through the decoding path (pretty output), protobuf, their
// metadata alone (client-go's metadata client), and the bare etcd range of
// the same keys.
func BenchmarkList2000(b *testing.B) {
	s := startServer(b)
	s.namespace(b, "lists")
	c := benchClient()
	const n = 2000
	sem := make(chan struct{}, 16)
	done := make(chan struct{}, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; done <- struct{}{} }()
			body := `{"metadata":{"name":"l-` + strconv.Itoa(i) + `"},"data":{"v":"` + benchValue + `"}}`
			benchDo(b, c, http.MethodPost, s.URL+"/api/v1/namespaces/lists/configmaps", body)
		}()
	}
	for range n {
		<-done
	}
	list := func(query, accept string) func(b *testing.B) {
		return func(b *testing.B) {
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, s.URL+"/api/v1/namespaces/lists/configmaps"+query, nil)
				if accept != "" {
					req.Header.Set("Accept", accept)
				}
				resp, err := c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("list: %d %v", resp.StatusCode, err)
				}
				resp.Body.Close()
			}
		}
	}
	b.Run("json", list("", ""))
	b.Run("json-decoded", list("?pretty=true", ""))
	b.Run("protobuf", list("", "application/vnd.kubernetes.protobuf"))
	b.Run("metadata", list("", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"))
	b.Run("etcd", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Etcd.Client.Get(context.Background(), "/registry/configmaps/lists/", clientv3.WithPrefix()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchWidgetsCRD is the custom resource of BenchmarkCustomResourcePath: a
// small schema and one CEL rule, as apibench's.
const benchWidgetsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.bench.example.com"},
 "spec":{"group":"bench.example.com","scope":"Namespaced","names":{"plural":"widgets","kind":"Widget"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{
      "replicas":{"type":"integer","minimum":0},
      "maxReplicas":{"type":"integer"},
      "note":{"type":"string","maxLength":2048}},
     "x-kubernetes-validations":[{"rule":"self.replicas <= self.maxReplicas","message":"replicas must not exceed maxReplicas"}]}}}}}]}}`

// BenchmarkCustomResourcePath runs create, replace and get of a 1 KiB
// custom object and of a 1 KiB ConfigMap through the same server (with
// the CRD controllers, so writes carry the CRD guard), 16 parallel workers:
// the target is the custom object at ≥ 0.9× the ConfigMap.
//
//	go test ./apiserver/ -run '^$' -bench 'BenchmarkCustomResourcePath' -benchtime 3s
func BenchmarkCustomResourcePath(b *testing.B) {
	s := startCRDServer(b)
	s.createCRD(b, benchWidgetsCRD)
	c := benchClient()
	var seq atomic.Int64
	note := strings.Repeat("n", 900)
	kinds := []struct {
		name, path string
		body       func(name, rv string, i int) string
	}{
		{"configmap", "/api/v1/namespaces/ns/configmaps", func(name, rv string, i int) string {
			out, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name, "resourceVersion": rv},
				"data": map[string]string{"v": note, "i": strconv.Itoa(i)}})
			return string(out)
		}},
		{"widget", "/apis/bench.example.com/v1/namespaces/ns/widgets", func(name, rv string, i int) string {
			out, _ := json.Marshal(map[string]any{"apiVersion": "bench.example.com/v1", "kind": "Widget",
				"metadata": map[string]any{"name": name, "resourceVersion": rv},
				"spec":     map[string]any{"replicas": i % 10, "maxReplicas": 10, "note": note}})
			return string(out)
		}},
	}
	for _, k := range kinds {
		b.Run(k.name+"/create", func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(seq.Add(1))
					benchDo(b, c, http.MethodPost, s.URL+k.path, k.body("c-"+strconv.Itoa(i), "", i))
				}
			})
		})
		b.Run(k.name+"/update", func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				name := "u-" + strconv.FormatInt(seq.Add(1), 10)
				var obj struct {
					Metadata struct{ ResourceVersion string } `json:"metadata"`
				}
				if err := json.Unmarshal(benchDo(b, c, http.MethodPost, s.URL+k.path, k.body(name, "", 0)), &obj); err != nil {
					b.Fatal(err)
				}
				for i := 1; pb.Next(); i++ {
					if err := json.Unmarshal(benchDo(b, c, http.MethodPut, s.URL+k.path+"/"+name, k.body(name, obj.Metadata.ResourceVersion, i)), &obj); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		benchDo(b, c, http.MethodPost, s.URL+k.path, k.body("g", "", 1))
		b.Run(k.name+"/get", func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					benchDo(b, c, http.MethodGet, s.URL+k.path+"/g", "")
				}
			})
		})
	}
}
