package apiserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/concord-dev/concord/registry"
)

// wireRecorder keeps every response body a client received, so a test can
// assert what went over the wire, not what the client made of it.
type wireRecorder struct {
	next   http.RoundTripper
	bodies chan []byte
}

func (w *wireRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &recordedBody{ReadCloser: resp.Body, out: w.bodies}
	return resp, nil
}

// recordedBody copies what is read of a response body; a watch's is closed
// by Stop while its decoder may still read.
type recordedBody struct {
	io.ReadCloser
	mu  sync.Mutex
	buf bytes.Buffer
	out chan []byte
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.buf.Write(p[:n])
	b.mu.Unlock()
	return n, err
}

func (b *recordedBody) Close() error {
	err := b.ReadCloser.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.out <- bytes.Clone(b.buf.Bytes()):
	default:
	}
	return err
}

// seen is everything recorded so far, as one string.
func (w *wireRecorder) seen() string {
	var all strings.Builder
	for {
		select {
		case b := <-w.bodies:
			all.Write(b)
		default:
			return all.String()
		}
	}
}

// metadataClient is client-go's metadata client (what controller-runtime's
// metadata-only caches use) on s, recording what it receives.
func metadataClient(t *testing.T, s *testServer) (metadata.Interface, *wireRecorder) {
	t.Helper()
	rec := &wireRecorder{bodies: make(chan []byte, 100)}
	c, err := metadata.NewForConfig(&rest.Config{Host: s.URL, WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
		rec.next = rt
		return rec
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

// TestMetadataClientGetsListsAndWatchesSecretsWithoutTheirData: client-go's
// metadata client asks for PartialObjectMetadata (protobuf first) and gets
// it, as from kube-apiserver: a Secret's metadata, never its data on the
// wire. (client-go clears the kind it decodes: TestPartialObjectMetadata*
// read the wire.)
func TestMetadataClientGetsListsAndWatchesSecretsWithoutTheirData(t *testing.T) {
	s := startServer(t)
	const secretValue = "c2VjcmV0LXZhbHVlLW9uLXRoZS13aXJl" // base64 of a value never to be seen
	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s", "labels": map[string]any{"app": "x"}},
		"data": map[string]any{"password": secretValue}}
	if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/default/secrets", secret); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	client, rec := metadataClient(t, s)
	secrets := client.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace("default")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	got, err := secrets.Get(ctx, "s", metav1.GetOptions{})
	if err != nil || got.Name != "s" || got.Labels["app"] != "x" || got.UID == "" || got.ResourceVersion == "" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	list, err := secrets.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "s" || list.ResourceVersion == "" {
		t.Fatalf("list: %+v, %v", list, err)
	}

	w, err := secrets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	update := s.do(t, http.MethodPatch, "/api/v1/namespaces/default/secrets/s", `{"metadata":{"labels":{"app":"y"}}}`,
		"Content-Type", "application/merge-patch+json")
	if update.Code != http.StatusOK {
		t.Fatalf("patch: %d %s", update.Code, update.Body)
	}
	select {
	case ev := <-w.ResultChan():
		m, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if ev.Type != watch.Modified || !ok || m.Labels["app"] != "y" {
			t.Fatalf("watch event: %s %#v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	w.Stop()
	// (managedFields name the key, f:password, as kube's do.)
	if wire := rec.seen(); !strings.Contains(wire, `"f:password"`) || strings.Contains(wire, secretValue) {
		t.Errorf("the Secret's data went over the wire to the metadata client")
	}
}

// TestPartialObjectMetadataInEveryFormat: the metadata of an object or a
// list, in JSON, YAML and protobuf; the wrong one of the two is kube's 406.
func TestPartialObjectMetadataInEveryFormat(t *testing.T) {
	s := startServer(t)
	cm := s.create(t, "default", "cm", map[string]string{"app": "x"})
	cm.Data = map[string]string{"k": "secret-value"}
	s.put(t, cm)
	const (
		objectJSON = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
		listJSON   = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	)
	tests := []struct {
		name, path, accept string
		wantKind, wantType string
	}{
		{"object JSON", nsPath + "/cm", objectJSON, "PartialObjectMetadata", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"},
		{"list JSON", nsPath, listJSON, "PartialObjectMetadataList", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
		{"object YAML", nsPath + "/cm", "application/yaml;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "PartialObjectMetadata", "application/yaml;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"},
		{"list YAML", nsPath, "application/yaml;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "PartialObjectMetadataList", "application/yaml;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
		{"object protobuf", nsPath + "/cm", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "PartialObjectMetadata", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"},
		{"list protobuf", nsPath, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", "PartialObjectMetadataList", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
		// The first range Concord serves decides, as in kube.
		{"fallback after v1beta1", nsPath, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1," + listJSON, "PartialObjectMetadataList", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
		{"plain first", nsPath, "application/json," + listJSON, "ConfigMapList", "application/json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, http.MethodGet, tc.path, nil, "Accept", tc.accept)
			if resp.Code != http.StatusOK || resp.Header.Get("Content-Type") != tc.wantType {
				t.Fatalf("%d %q: %s", resp.Code, resp.Header.Get("Content-Type"), resp.Body)
			}
			mediaType, _, _ := strings.Cut(tc.wantType, ";")
			info, ok := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), mediaType)
			if !ok {
				t.Fatalf("no decoder for %s", mediaType)
			}
			obj, gvk, err := info.Serializer.Decode(resp.Body, nil, nil)
			if err != nil || gvk.Kind != tc.wantKind {
				t.Fatalf("decode: %v, %v: %s", gvk, err, resp.Body)
			}
			switch o := obj.(type) {
			case *metav1.PartialObjectMetadata:
				if o.Name != "cm" || o.Labels["app"] != "x" || o.ResourceVersion == "" || o.UID == "" {
					t.Errorf("metadata: %+v", o.ObjectMeta)
				}
			case *metav1.PartialObjectMetadataList:
				if len(o.Items) != 1 || o.Items[0].Name != "cm" || o.ResourceVersion == "" {
					t.Fatalf("list: %+v", o)
				}
				// Protobuf items have no TypeMeta field.
				protobuf := mediaType == runtime.ContentTypeProtobuf
				if !protobuf && (o.Items[0].Kind != "PartialObjectMetadata" || o.Items[0].APIVersion != "meta.k8s.io/v1") {
					t.Errorf("list item: kind %q apiVersion %q", o.Items[0].Kind, o.Items[0].APIVersion)
				}
			case *corev1.ConfigMapList:
				if len(o.Items) != 1 || o.Items[0].Data["k"] != "secret-value" {
					t.Errorf("list: %+v", o)
				}
			default:
				t.Errorf("decoded %T", obj)
			}
			if tc.wantKind != "ConfigMapList" && strings.Contains(string(resp.Body), "secret-value") {
				t.Errorf("the object's data is in the answer: %s", resp.Body)
			}
		})
	}
	// An empty list's items are null, as kube-apiserver's.
	empty := s.do(t, http.MethodGet, "/api/v1/namespaces/other/configmaps", nil, "Accept", listJSON)
	if empty.Code != http.StatusOK || !strings.Contains(string(empty.Body), `"items":null`) {
		t.Errorf("empty list: %d %s", empty.Code, empty.Body)
	}
	// The wrong one of the two: 406 NotAcceptable, kube's message.
	for _, tc := range []struct{ path, accept, message string }{
		{nsPath, objectJSON, "you requested PartialObjectMetadata, but the requested object is a list"},
		{nsPath + "/cm", listJSON, "you requested PartialObjectMetadataList, but the requested object is not a list"},
	} {
		resp := s.do(t, http.MethodGet, tc.path, nil, "Accept", tc.accept)
		st := resp.status(t)
		if resp.Code != http.StatusNotAcceptable || st.Reason != metav1.StatusReasonNotAcceptable || !strings.HasPrefix(st.Message, tc.message) {
			t.Errorf("GET %s as %s: %d %s %q", tc.path, tc.accept, resp.Code, st.Reason, st.Message)
		}
	}
}

// TestPartialObjectMetadataWatchOverJSON: a JSON watch that asks for
// PartialObjectMetadata gets each event's object as one, with
// kind/apiVersion meta.k8s.io/v1, and no data; PartialObjectMetadataList is
// 406 before the watch starts.
func TestPartialObjectMetadataWatchOverJSON(t *testing.T) {
	s := startServer(t)
	_, before := s.list(t, nsPath, nil)
	cm := s.create(t, "default", "cm", nil)
	resp := s.do(t, http.MethodGet, nsPath+"?watch=true&timeoutSeconds=1&resourceVersion="+before.ResourceVersion, nil,
		"Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
	if resp.Code != http.StatusOK {
		t.Fatalf("watch: %d %s", resp.Code, resp.Body)
	}
	line, _, _ := strings.Cut(string(resp.Body), "\n")
	var ev struct {
		Type   string
		Object map[string]any
	}
	if err := yaml.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatalf("event %s: %v", line, err)
	}
	md, _ := ev.Object["metadata"].(map[string]any)
	if ev.Type != "ADDED" || ev.Object["kind"] != "PartialObjectMetadata" || ev.Object["apiVersion"] != "meta.k8s.io/v1" ||
		md["name"] != cm.Name || len(ev.Object) != 3 {
		t.Errorf("event: %s", line)
	}
	refused := s.do(t, http.MethodGet, nsPath+"?watch=true&timeoutSeconds=1", nil,
		"Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
	if st := refused.status(t); refused.Code != http.StatusNotAcceptable || st.Reason != metav1.StatusReasonNotAcceptable {
		t.Errorf("watch as a list: %d %s", refused.Code, refused.Body)
	}
}

// TestMetadataClientOnCustomResources: the metadata client gets, lists,
// watches and patches custom objects too (controller-runtime's metadata
// watches of CRs), in protobuf, which a custom resource is not otherwise
// served in.
func TestMetadataClientOnCustomResources(t *testing.T) {
	s := startCRDServer(t)
	s.waitServed(t, s.createCRD(t, gadgetsCRD))
	if resp := s.do(t, http.MethodPost, gadgets, gadget("a", map[string]any{"color": "red"})); resp.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.Code, resp.Body)
	}
	client, rec := metadataClient(t, s)
	res := client.Resource(gadgetsGVR).Namespace("ns")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := res.Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Name != "a" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patched, err := res.Patch(ctx, "a", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"l":"v"}}}`), metav1.PatchOptions{})
	if err != nil || patched.Labels["l"] != "v" {
		t.Fatalf("patch: %+v, %v", patched, err)
	}
	select {
	case ev := <-w.ResultChan():
		if m, ok := ev.Object.(*metav1.PartialObjectMetadata); ev.Type != watch.Modified || !ok || m.Labels["l"] != "v" {
			t.Fatalf("watch event: %s %#v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	w.Stop()
	if wire := rec.seen(); strings.Contains(wire, `"spec":`) || strings.Contains(wire, "red") {
		t.Errorf("the custom object's spec went over the wire to the metadata client")
	}
	// Over protobuf, as the client asked first.
	resp := s.do(t, http.MethodGet, gadgets+"/a", nil, "Accept", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
	if resp.Code != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/vnd.kubernetes.protobuf") {
		t.Fatalf("protobuf: %d %q %s", resp.Code, resp.Header.Get("Content-Type"), resp.Body)
	}
	info, _ := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	obj, gvk, err := info.Serializer.Decode(resp.Body, nil, nil)
	if m, ok := obj.(*metav1.PartialObjectMetadata); err != nil || !ok || m.Name != "a" ||
		*gvk != (schema.GroupVersionKind{Group: "meta.k8s.io", Version: "v1", Kind: "PartialObjectMetadata"}) {
		t.Errorf("protobuf: %v %v %#v", gvk, err, obj)
	}
}

// TestMetadataInformerSyncsAndFollows: client-go's metadata informer (what
// controller-runtime's metadata-only watches run) lists or watch-lists
// Secrets as PartialObjectMetadata, syncs, and sees a change.
func TestMetadataInformerSyncsAndFollows(t *testing.T) {
	s := startServer(t)
	for _, name := range []string{"a", "b"} {
		body := map[string]any{"metadata": map[string]any{"name": name}, "data": map[string]any{"k": "dmFsdWU="}}
		if resp := s.do(t, http.MethodPost, "/api/v1/namespaces/default/secrets", body); resp.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.Code, resp.Body)
		}
	}
	client, _ := metadataClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, "default", nil)
	informer := factory.ForResource(corev1.SchemeGroupVersion.WithResource("secrets")).Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the metadata informer did not sync")
	}
	if keys := informer.GetStore().ListKeys(); len(keys) != 2 {
		t.Fatalf("synced %v; want default/a and default/b", keys)
	}
	if resp := s.do(t, http.MethodPatch, "/api/v1/namespaces/default/secrets/a", `{"metadata":{"labels":{"seen":"yes"}}}`,
		"Content-Type", "application/merge-patch+json"); resp.Code != http.StatusOK {
		t.Fatalf("patch: %d %s", resp.Code, resp.Body)
	}
	for ctx.Err() == nil {
		if obj, ok, _ := informer.GetStore().GetByKey("default/a"); ok && obj.(*metav1.PartialObjectMetadata).Labels["seen"] == "yes" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the metadata informer did not see the change")
}
