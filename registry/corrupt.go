package registry

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/concord-dev/concord/etcdstore"
)

// A stored value that does not decrypt or decode — written by a
// kube-apiserver that stores protobuf, restored from the wrong backup, cut
// short — is what kube-apiserver calls a corrupt object (KEP-3926). It fails
// exactly the requests that would include it, naming its key: its get,
// update, patch and delete (500 InternalError), and every list that could
// hold it (500 StorageReadError: a partial list could make a controller
// delete what is missing from it). A watch whose changes include it gets an
// ERROR event naming it and ends. Everything else is served as usual. It is
// reported once (logged and counted, see OnCorruptObject), and deleted
// with the delete option ignoreStoreReadErrorWithClusterBreakingPotential
// (deleteCorrupt).

// corruption is why a stored value cannot be read.
type corruption int

const (
	untransformable corruption = iota + 1 // it does not decrypt
	undecodable                           // it is not an object of the resource
)

// corruptObjectError is a stored value that cannot be read. Its text is
// kube-apiserver's StorageError of a corrupt object; as a Status (a get,
// update, patch or delete of it) it is kube's 500 InternalError.
type corruptObjectError struct {
	gr schema.GroupResource
	// key is the etcd key, as etcdctl knows it.
	key string
	// namespace and name are the object's, read from its key.
	namespace, name string
	revision        int64
	why             corruption
	err             error
}

func (e *corruptObjectError) Error() string {
	what := "object not decodable"
	if e.why == untransformable {
		what = "data from the storage is not transformable"
	}
	return fmt.Sprintf("StorageError: corrupt object, Code: 7, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: %s revision=%d: %v", e.key, what, e.revision, e.err)
}

func (e *corruptObjectError) Unwrap() error { return e.err }

// Status is kube-apiserver's answer to a get, update, patch or delete of
// the object: 500 InternalError with the StorageError.
func (e *corruptObjectError) Status() metav1.Status {
	return apierrors.NewInternalError(e).Status()
}

// cause names the object in a StorageReadError.
func (e *corruptObjectError) cause() metav1.StatusCause {
	return metav1.StatusCause{Type: metav1.CauseTypeUnexpectedServerResponse, Field: e.key, Message: e.Error()}
}

// watchStatus is the ERROR event of a watch whose changes include the
// object: 500 StorageReadError, kube's reason for a store read error, which
// makes client-go's reflector list again rather than watch again from the
// same resourceVersion.
func (e *corruptObjectError) watchStatus() metav1.Status {
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Reason:  metav1.StatusReasonStoreReadError,
		Message: e.Error(),
		Details: &metav1.StatusDetails{Name: e.name, Group: e.gr.Group, Kind: e.gr.Resource, Causes: []metav1.StatusCause{e.cause()}},
	}
}

// selectedBy reports whether the object could be in f's selection. Its
// name and namespace are known from its key; its labels and other fields
// are not, so any label selector, and any requirement on another field,
// could select it.
func (e *corruptObjectError) selectedBy(f filter) bool {
	known := fields.Set{"metadata.name": e.name, "metadata.namespace": e.namespace}
	for _, req := range f.fields.Requirements() {
		value, ok := known[req.Field]
		if !ok {
			continue
		}
		// Field selectors have =, == and != only.
		if (req.Operator == selection.NotEquals) == (value == req.Value) {
			return false
		}
	}
	return true
}

// asCorrupt returns err's corrupt object, if it is one.
func asCorrupt(err error) (*corruptObjectError, bool) {
	var e *corruptObjectError
	ok := errors.As(err, &e)
	return e, ok
}

// maxCorruptListed is how many objects a StorageReadError names, as in
// kube-apiserver; a list that meets more stops there.
const maxCorruptListed = 100

// corruptListError is kube-apiserver's answer to a list that met corrupt
// objects: 500 StorageReadError naming each key in a cause.
type corruptListError struct {
	gr        schema.GroupResource
	objects   []*corruptObjectError
	truncated bool
}

func (e *corruptListError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unable to transform or decode %d objects: {\n", len(e.objects))
	for _, o := range e.objects {
		fmt.Fprintf(&b, "\t%s\n", o)
	}
	b.WriteString("}")
	return b.String()
}

func (e *corruptListError) Status() metav1.Status {
	causes := make([]metav1.StatusCause, 0, len(e.objects)+1)
	for _, o := range e.objects {
		causes = append(causes, o.cause())
	}
	if e.truncated {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeTooMany, Message: "too many errors, the list is truncated"})
	}
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Reason:  metav1.StatusReasonStoreReadError,
		Message: fmt.Sprintf("failed to read one or more %s from the storage", e.gr),
		Details: &metav1.StatusDetails{Group: e.gr.Group, Kind: e.gr.Resource, Name: "list", Causes: causes},
	}
}

// corruptItems gathers the corrupt objects a list meets, so that it fails
// naming all of them (up to maxCorruptListed) instead of at the first.
// Those whose key its field selector excludes are not in the list: they are
// left out without failing it.
type corruptItems struct {
	filter filter
	list   corruptListError
}

func (s *Store) newCorruptItems(f filter) *corruptItems {
	return &corruptItems{filter: f, list: corruptListError{gr: s.Resource.GroupResource()}}
}

// add takes err if it is a corrupt object's (nil: read on); any other
// error, or one corrupt object too many, is returned to end the list.
func (c *corruptItems) add(err error) error {
	e, ok := asCorrupt(err)
	if !ok {
		return err
	}
	if !e.selectedBy(c.filter) {
		return nil
	}
	if len(c.list.objects) == maxCorruptListed {
		c.list.truncated = true
		return &c.list
	}
	c.list.objects = append(c.list.objects, e)
	return nil
}

// err is the list's failure, if it met corrupt objects.
func (c *corruptItems) err() error {
	if len(c.list.objects) == 0 {
		return nil
	}
	return &c.list
}

// corrupt is the error of the value stored at key (its storageKey) that
// does not decrypt or decode, reported the first time it is met.
func (s *Store) corrupt(key string, stored etcdstore.Object, why corruption, err error) error {
	rest := strings.TrimPrefix(key, s.Resource.storagePrefix()+"/")
	namespace, name := "", rest
	if s.Resource.Namespaced {
		namespace, name, _ = strings.Cut(rest, "/")
	}
	e := &corruptObjectError{
		gr: s.Resource.GroupResource(), key: s.etcdKey(key), namespace: namespace, name: name,
		revision: stored.Revision, why: why, err: err,
	}
	s.corruptions.note(s.Resource, e, stored.Value)
	return e
}

// notJSONObject is the error of a value passed through as JSON that is not
// a JSON object with metadata: the error decoding it gives, so that every
// client is told the same; err if it decodes (an object without metadata).
func (s *Store) notJSONObject(key string, stored etcdstore.Object, err error) error {
	if _, decodeErr := s.decode(key, stored); decodeErr != nil {
		return decodeErr
	}
	return s.corrupt(key, stored, undecodable, fmt.Errorf("stored %s: %w", s.Resource.Kind, err))
}

// prefixed is a storage that says under which prefix its keys are
// (*etcdstore.Store), so that errors name keys as etcdctl knows them.
type prefixed interface{ Prefix() string }

// etcdKey is the etcd key of key (a storageKey).
func (s *Store) etcdKey(key string) string {
	if p, ok := s.storage.(prefixed); ok {
		return p.Prefix() + "/" + key
	}
	return key
}

// CorruptObject is a stored value that does not decrypt or decode.
type CorruptObject struct {
	Resource *Resource
	// Key is the etcd key; Revision the revision the value was written at.
	Key      string
	Revision int64
	// Err says why it cannot be read.
	Err error
}

// OnCorruptObject has report called once for every stored value met that
// does not decrypt or decode (once per key and value, however often it is
// read), so that the server logs and counts it. Set it before serving.
func (s *Store) OnCorruptObject(report func(CorruptObject)) {
	s.corruptions.mu.Lock()
	defer s.corruptions.mu.Unlock()
	s.corruptions.report = report
}

// corruptReports reports each corrupt value once; the zero value reports
// nothing until OnCorruptObject.
type corruptReports struct {
	mu     sync.Mutex
	report func(CorruptObject)
	// seen are the values reported: a key's value at one revision never
	// changes, and a deleted value's previous state on the watch is the
	// same bytes.
	seen map[corruptValue]struct{}
}

type corruptValue struct {
	key string
	sum uint64
}

// maxCorruptReports bounds the values remembered as reported; past it the
// memory starts over, and a value may be reported again.
const maxCorruptReports = 1024

var corruptSeed = maphash.MakeSeed()

func (r *corruptReports) note(res *Resource, e *corruptObjectError, value []byte) {
	r.mu.Lock()
	report := r.report
	v := corruptValue{key: e.key, sum: maphash.Bytes(corruptSeed, value)}
	_, seen := r.seen[v]
	if report == nil || seen {
		r.mu.Unlock()
		return
	}
	if r.seen == nil || len(r.seen) >= maxCorruptReports {
		r.seen = map[corruptValue]struct{}{}
	}
	r.seen[v] = struct{}{}
	r.mu.Unlock()
	report(CorruptObject{Resource: res, Key: e.key, Revision: e.revision, Err: e.err})
}

// IgnoresReadErrors reports whether opts ask for kube-apiserver's unsafe
// delete of an object whose stored value cannot be read
// (ignoreStoreReadErrorWithClusterBreakingPotential).
func IgnoresReadErrors(opts *metav1.DeleteOptions) bool {
	return opts != nil && opts.IgnoreStoreReadErrorWithClusterBreakingPotential != nil && *opts.IgnoreStoreReadErrorWithClusterBreakingPotential
}

// ignoreReadErrorsField is the delete option, as a field in errors.
var ignoreReadErrorsField = field.NewPath("ignoreStoreReadErrorWithClusterBreakingPotential")

// deleteCorrupt is the delete of ignoreStoreReadErrorWithClusterBreakingPotential,
// as kube-apiserver's corrupt object deleter: the key goes, with one etcd
// transaction guarded by the revision it was read at, whatever its value
// would have said — finalizers, and anything else that depends on the
// object, are ignored. Only a value that does not decrypt or decode may be
// deleted so (422 for a readable object); conds (If-Match, If-None-Match)
// still hold, and dryRun deletes nothing. The caller has authorized it.
func (s *Store) deleteCorrupt(ctx context.Context, namespace, name string, conds WriteOptions) (runtime.Object, error) {
	gr := s.Resource.GroupResource()
	ref, key := s.ref(namespace, name), s.keyOf(namespace, name)
	for range maxWriteAttempts {
		stored, err := s.storage.Get(ctx, ref, 0)
		if err != nil {
			return nil, StatusError(err, gr, name)
		}
		_, err = s.decode(key, stored)
		if err == nil {
			return nil, apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: gr.Resource}, name, field.ErrorList{
				field.Invalid(ignoreReadErrorsField, true, "it is exclusively used to delete corrupt object(s), try again by removing this option"),
			})
		}
		if _, ok := asCorrupt(err); !ok {
			return nil, err
		}
		current := formatRevision(stored.Revision)
		if conds.IfMatch != nil && !conds.IfMatch(current) {
			return nil, newPreconditionFailed(gr, name, "If-Match", current)
		}
		if conds.IfNoneMatch != nil && conds.IfNoneMatch(current) {
			return nil, newPreconditionFailed(gr, name, "If-None-Match", current)
		}
		if !conds.DryRun {
			delRev, err := s.storage.Delete(ctx, ref, stored.Revision)
			if errors.Is(err, etcdstore.ErrConflict) {
				continue // written meanwhile: look at it again
			}
			if err != nil {
				return nil, StatusError(err, gr, name)
			}
			s.recent.drop(s.recentKey(namespace, name), delRev)
		}
		// kube-apiserver's answer: nothing of the object can be said.
		return &metav1.Status{
			Status:  metav1.StatusSuccess,
			Code:    http.StatusOK,
			Details: &metav1.StatusDetails{Name: name, Kind: s.Resource.Kind},
		}, nil
	}
	return nil, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
}
