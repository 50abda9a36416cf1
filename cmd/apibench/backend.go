package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"
)

// Outcomes every backend reports the same way, whether a kube API (409
// Conflict, 409 AlreadyExists, 404) or etcd (a failed transaction).
var (
	errConflict = errors.New("conflict: the object changed since the given resourceVersion")
	errExists   = errors.New("already exists")
	errNotFound = errors.New("not found")
)

// backend is one target: the operations every workload is made of, each one
// request to the target.
type backend interface {
	// ensureNamespace makes ns exist; created reports that this call made it.
	ensureNamespace(ctx context.Context, ns string) (created bool, err error)
	// The operations are on ConfigMaps, or on the objects of the
	// resource an API target was given (--resource).
	//
	// create stores a new ConfigMap; its revision (resourceVersion).
	create(ctx context.Context, ns, name string, data map[string]string) (int64, error)
	// update replaces the ConfigMap if it is still at rv (errConflict if not).
	update(ctx context.Context, ns, name string, data map[string]string, rv int64) (int64, error)
	// get reads one ConfigMap with a quorum read.
	get(ctx context.Context, ns, name string) (map[string]string, int64, error)
	// list reads every ConfigMap of ns with a quorum read. With check, the
	// answer is decoded and its items counted (items is -1 otherwise);
	// without, it is only read to the end.
	list(ctx context.Context, ns string, check bool) (items int, rv int64, err error)
	// watch watches the ConfigMaps of ns from revision rv (exclusive) and
	// returns once the watch is established; handle gets every event, from
	// one goroutine. done is closed, with its error set, when the stream
	// ends: err is nil when ctx ended it.
	watch(ctx context.Context, ns string, rv int64, handle func(watchEvent)) (*watchStream, error)
	// deleteAll deletes the named ConfigMaps of ns (missing ones are fine),
	// calling progress with the number done so far.
	deleteAll(ctx context.Context, ns string, names []string, progress func(done int)) error
	// deleteNamespace deletes ns.
	deleteNamespace(ctx context.Context, ns string) error
	close()
}

// watchEvent is one event as a watcher received it.
type watchEvent struct {
	Type string
	RV   int64
	Data map[string]string
	// Received is when the event's bytes were read.
	Received time.Time
}

// watchStream is an open watch; Err is valid once Done is closed.
type watchStream struct {
	Done chan struct{}
	Err  error
}

type objectMeta struct {
	Name              string `json:"name"`
	Namespace         string `json:"namespace,omitempty"`
	UID               string `json:"uid,omitempty"`
	ResourceVersion   string `json:"resourceVersion,omitempty"`
	CreationTimestamp string `json:"creationTimestamp,omitempty"`
}

// storedConfigMap is the value a Concord would write to etcd for this
// ConfigMap: apiVersion, kind, name, namespace, uid, creation time and data
// (no resourceVersion: that is the key's ModRevision).
func storedConfigMap(ns, name string, data map[string]string) ([]byte, error) {
	return json.Marshal(apiObject{
		Kind:       "ConfigMap",
		APIVersion: "v1",
		Metadata: objectMeta{
			Name:              name,
			Namespace:         ns,
			UID:               randomUID(),
			CreationTimestamp: time.Now().UTC().Truncate(time.Second).Format(time.RFC3339),
		},
		Data: data,
	})
}

// randomUID is a random version-4 UUID in its text form.
func randomUID() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 36)
	for i := range b {
		switch i {
		case 8, 13, 18, 23:
			b[i] = '-'
		case 14:
			b[i] = '4'
		case 19:
			b[i] = hex[8+rand.IntN(4)]
		default:
			b[i] = hex[rand.IntN(16)]
		}
	}
	return string(b)
}

// payload is the n bytes of data every object carries: printable and not
// all the same byte, so nothing on the way compresses it to nothing.
func payload(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	r := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}
