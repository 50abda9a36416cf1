package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	kjson "sigs.k8s.io/json"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry/encryption"
)

// Storage is what the registry needs from etcd. *etcdstore.Store implements
// it; see there for the contract of each method.
type Storage interface {
	Get(ctx context.Context, ref etcdstore.Ref, revision int64) (etcdstore.Object, error)
	List(ctx context.Context, resource, namespace string, opts etcdstore.ListOptions) (etcdstore.ListResult, error)
	Create(ctx context.Context, ref etcdstore.Ref, value []byte, guards ...etcdstore.Guard) (int64, error)
	Update(ctx context.Context, ref etcdstore.Ref, value []byte, revision int64, guards ...etcdstore.Guard) (int64, error)
	Delete(ctx context.Context, ref etcdstore.Ref, revision int64, guards ...etcdstore.Guard) (int64, error)
	Watch(ctx context.Context, resource string, from int64, opts etcdstore.WatchOptions) (*etcdstore.Watch, error)
	CurrentRevision(ctx context.Context) (int64, error)
	Count(ctx context.Context, resource string) (int64, error)
}

// storageCodec writes objects to etcd as JSON with apiVersion and kind, so
// etcdctl users can read them; resourceVersion is never stored (it is the
// key's ModRevision).
var storageCodec = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, Scheme, Scheme, jsonserializer.SerializerOptions{})

// encodeJSON writes obj as storageCodec does. A custom object's map goes
// to encoding/json directly (kube's UnstructuredJSONScheme, the same bytes):
// through the codec, encoding/json would call its MarshalJSON and then
// parse and compact what that returned, a second pass over every byte.
func encodeJSON(obj Object, w io.Writer) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return unstructured.UnstructuredJSONScheme.Encode(u, w)
	}
	return storageCodec.Encode(obj, w)
}

// Store implements get, list, create, replace and delete for one resource.
// Errors it returns are *apierrors.StatusError, or internal errors.
type Store struct {
	Resource *Resource
	storage  Storage
	watch    *broadcaster
	// cache serves gets and lists (first pages) from memory; nil without one (see
	// cache.go). revisions reads etcd's revision for them, one request for
	// many (revision.go); NewStores shares one among its stores.
	cache     *readCache
	revisions *revisionReader
	// admission is SetAdmission's check; nil: none.
	admission func(ctx context.Context, obj, old Object) error
	// admitter is WithAdmission's; nil: none.
	admitter Admission
	// transformer encrypts and decrypts the stored values (see
	// WithEncryption); identity unless configured.
	transformer encryption.Transformer
	// recent is what this replica last saw of recently used objects; see
	// recent.go.
	recent *recent
	// namespaces is the Namespace store, whose objects guard creates.
	namespaces *Store
	// corruptions reports the stored values that cannot be read (corrupt.go).
	corruptions corruptReports
	// unconditional says which replaces may come without a version, and
	// unconditionalReport is told of each one done (unconditional.go).
	unconditional       UnconditionalUpdate
	unconditionalReport func(ctx context.Context, u UnconditionalReplace)
	// fields are the resource's field managers, built at its first write
	// (managedfields.go).
	fields func() (*fieldManagers, error)
}

// NewStore returns the store of res over storage.
func NewStore(storage Storage, res *Resource, cfg WatchConfig, opts ...StoreOption) *Store {
	s := &Store{Resource: res, storage: storage, recent: newRecent(), transformer: encryption.Identity()}
	s.cache = newReadCache(s)
	s.fields = sync.OnceValues(func() (*fieldManagers, error) { return newFieldManagers(res) })
	s.revisions = newRevisionReader(storage.CurrentRevision)
	for _, o := range opts {
		o(s)
	}
	s.watch = newBroadcaster(s, cfg)
	return s
}

// NewStores returns a store for every declared resource.
func NewStores(storage Storage, cfg WatchConfig, opts ...StoreOption) []*Store {
	stores := make([]*Store, 0, len(Resources))
	var namespaces *Store
	// etcd has one revision for all keys: one reader serves every store.
	revisions := newRevisionReader(storage.CurrentRevision)
	for _, res := range Resources {
		s := NewStore(storage, res, cfg, opts...)
		s.revisions = revisions
		stores = append(stores, s)
		if res.IsNamespace {
			namespaces = s
		}
	}
	if namespaces != nil {
		for _, s := range stores {
			if s.Resource.Namespaced {
				s.namespaces = namespaces
			}
		}
	}
	return stores
}

// Ref is the storage reference of the object name in namespace (ignored
// for a cluster-scoped resource): what a Guard on that object names.
func (s *Store) Ref(namespace, name string) etcdstore.Ref { return s.ref(namespace, name) }

func (s *Store) ref(namespace, name string) etcdstore.Ref {
	if !s.Resource.Namespaced {
		namespace = ""
	}
	return etcdstore.Ref{Resource: s.Resource.storagePrefix(), Namespace: namespace, Name: name}
}

// Get reads one object with a linearizable read: from the cache when it
// serves (cache.go), else from etcd.
func (s *Store) Get(ctx context.Context, namespace, name string) (Object, error) {
	stored, cached, err := s.read(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return s.got(namespace, name, stored, cached)
}

// GetRecent answers from the read cache as it is, without waiting for it
// to be as current as etcd — as fresh as an informer's copy, milliseconds
// behind — and reads as Get does when the cache does not serve: for
// admission's namespace lookups (namespaceSelector, namespaceObject),
// which kube answers from an informer, and which would otherwise cost a
// write a quorum read.
func (s *Store) GetRecent(ctx context.Context, namespace, name string) (Object, error) {
	if s.cache != nil {
		key := name
		if ref := s.ref(namespace, name); ref.Namespace != "" {
			key = ref.Namespace + "/" + name
		}
		if e, ok := s.cache.peek(key); ok {
			if e == nil {
				return nil, apierrors.NewNotFound(s.Resource.GroupResource(), name)
			}
			return s.got(namespace, name, e.stored, e)
		}
	}
	return s.Get(ctx, namespace, name)
}

// GetFromStorage reads one object from etcd itself (a linearizable read),
// never from the read cache: for the garbage collector, whose decision to
// delete an object must rest on its owners' state in etcd.
func (s *Store) GetFromStorage(ctx context.Context, namespace, name string) (Object, error) {
	stored, err := s.storage.Get(ctx, s.ref(namespace, name), 0)
	if err != nil {
		return nil, StatusError(err, s.Resource.GroupResource(), name)
	}
	return s.got(namespace, name, stored, nil)
}

// got is the object Get answers for what read returned: a copy the caller
// may change.
func (s *Store) got(namespace, name string, stored etcdstore.Object, cached *cacheEntry) (Object, error) {
	obj, shared, err := s.served(namespace, name, stored, cached)
	if err != nil || !shared {
		return obj, err
	}
	return copyObject(obj), nil
}

// served is the object a read of namespace/name answers for what read
// returned, remembered as what the client read (clients read, edit and
// write back). shared: it is the cache's, never to be changed.
func (s *Store) served(namespace, name string, stored etcdstore.Object, cached *cacheEntry) (obj Object, shared bool, _ error) {
	if cached != nil {
		obj, err := cached.decode(s)
		if err != nil {
			return nil, false, err
		}
		s.recent.put(s.recentKey(namespace, name), stored, obj)
		return obj, true, nil
	}
	obj, err := s.decode(s.keyOf(namespace, name), stored)
	if err != nil {
		return nil, false, err
	}
	s.recent.put(s.recentKey(namespace, name), stored, copyObject(obj))
	return obj, false, nil
}

// read returns the current stored state of one object, linearizably: from
// the cache (cached is then its entry) when it serves, else from etcd.
func (s *Store) read(ctx context.Context, namespace, name string) (stored etcdstore.Object, cached *cacheEntry, _ error) {
	if s.cache != nil {
		key := name // the key relative to the resource's prefix
		if ref := s.ref(namespace, name); ref.Namespace != "" {
			key = ref.Namespace + "/" + name
		}
		e, ok, err := s.cache.get(ctx, key)
		if err != nil {
			return etcdstore.Object{}, nil, StatusError(err, s.Resource.GroupResource(), name)
		}
		if ok && e == nil {
			return etcdstore.Object{}, nil, apierrors.NewNotFound(s.Resource.GroupResource(), name)
		}
		if ok {
			return e.stored, e, nil
		}
	}
	stored, err := s.storage.Get(ctx, s.ref(namespace, name), 0)
	if err != nil {
		return etcdstore.Object{}, nil, StatusError(err, s.Resource.GroupResource(), name)
	}
	return stored, nil, nil
}

// Count returns how many objects of this resource etcd holds, in all
// namespaces (for the apiserver_resource_objects metric).
func (s *Store) Count(ctx context.Context) (int64, error) {
	n, err := s.storage.Count(ctx, s.Resource.storagePrefix())
	if err != nil {
		return 0, StatusError(err, s.Resource.GroupResource(), "")
	}
	return n, nil
}

// Create validates and stores a new object in namespace. The etcd write
// succeeds only if the key does not exist. A create whose admission
// policies changed before its write landed is admitted again, from the
// object as it was sent (admissionguard.go).
func (s *Store) Create(ctx context.Context, namespace string, obj Object, opts WriteOptions) (Object, error) {
	if s.admitter == nil {
		return s.create(ctx, namespace, obj, opts)
	}
	for attempt := 1; ; attempt++ {
		out, err := s.create(ctx, namespace, copyObject(obj), opts)
		if !errors.Is(err, ErrAdmissionChanged) {
			return out, err
		}
		if attempt == admissionAttempts {
			return nil, StatusError(&RetryError{Message: fmt.Sprintf("the admission policies kept changing while the write was admitted (%d attempts); nothing was written: send it again", attempt)}, s.Resource.GroupResource(), obj.GetName())
		}
	}
}

// admissionAttempts bounds how often one create is admitted while the
// admission policies keep changing.
const admissionAttempts = 3

func (s *Store) create(ctx context.Context, namespace string, obj Object, opts WriteOptions) (Object, error) {
	if obj.GetResourceVersion() != "" {
		return nil, apierrors.NewBadRequest("create cannot set resourceVersion")
	}
	if err := s.checkNamespace(namespace, obj); err != nil {
		return nil, err
	}
	if err := s.decodeRequest(obj, opts); err != nil {
		return nil, err
	}
	obj.SetUID("")
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	obj.SetGeneration(0)
	s.Resource.defaultRequest(obj, nil)
	obj, err := s.trackUpdate(nil, obj, opts)
	if err != nil {
		return nil, err
	}
	// Mutating admission sees the object before the store fills uid,
	// creationTimestamp and a generated name, as kube's create handler
	// admits it before its store's BeforeCreate.
	if obj, err = s.mutate(ctx, admission.Create, namespace, obj.GetName(), obj, nil, opts); err != nil {
		return nil, err
	}
	obj.SetUID(types.UID(uuid.NewString()))
	obj.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	s.Resource.Strategy.PrepareForCreate(obj)
	generated := obj.GetName() == "" && obj.GetGenerateName() != ""
	for attempt := 1; ; attempt++ {
		if generated {
			obj.SetName(generateName(obj.GetGenerateName()))
		}
		// Admission before validation, as kube: an escalating role is 403
		// even if it is invalid too.
		if err := s.admit(ctx, obj, nil); err != nil {
			return nil, err
		}
		if err := s.validateAlone(obj, true); err != nil {
			return nil, err
		}
		if ws, ok := s.Resource.Strategy.(WarningStrategy); ok {
			addWarnings(ctx, ws.WarningsOnCreate(obj))
		}
		// Each attempt is validated on what it stores (a new generated
		// name, managedFields dropped), as kube's store validates each.
		if err := s.validateAdmission(ctx, admission.Create, namespace, obj.GetName(), obj, nil, opts); err != nil {
			return nil, err
		}
		value, err := s.encode(s.keyOf(namespace, obj.GetName()), obj)
		if err != nil {
			return nil, err
		}
		rev, err := s.createIn(ctx, namespace, obj.GetName(), value, opts.DryRun)
		if generated && apierrors.IsAlreadyExists(err) && attempt < maxGenerateNameAttempts {
			continue // another random suffix
		}
		if dropManagedFields(err, obj, opts) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !opts.DryRun {
			obj.SetResourceVersion(formatRevision(rev))
			s.recent.putWritten(s.recentKey(namespace, obj.GetName()), etcdstore.Object{Value: value, Revision: rev}, copyObject(obj), s.Resource.Storage == nil)
		}
		return obj, nil
	}
}

// maxGenerateNameAttempts is how often kube-apiserver tries new suffixes.
const maxGenerateNameAttempts = 8

// generateName appends five random characters to base, as kube's
// SimpleNameGenerator does (base cut so the name stays within 63).
func generateName(base string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	if len(base) > 58 {
		base = base[:58]
	}
	b := []byte(base)
	for range 5 {
		b = append(b, alphabet[rand.IntN(len(alphabet))])
	}
	return string(b)
}

// WriteOptions qualify one write. IfMatch, IfNoneMatch and CreateOnly are
// HTTP preconditions on the stored resourceVersion, checked against the
// revision the write's etcd transaction is guarded by, so nothing can change
// between the check and the write.
type WriteOptions struct {
	// DryRun runs the whole write — defaulting, validation, preconditions —
	// and answers as if it were done, but writes nothing (dryRun=All).
	DryRun bool
	// IfMatch must accept the current resourceVersion, else 412.
	IfMatch func(resourceVersion string) bool
	// IfNoneMatch must not accept it, else 412.
	IfNoneMatch func(resourceVersion string) bool
	// CreateOnly (If-None-Match: *): the object must not exist yet; a
	// replace then creates it.
	CreateOnly bool
	// StrictFields refuses a patch that leaves unknown fields in the object
	// (fieldValidation=Strict; PUT and POST bodies are checked when decoded).
	StrictFields bool
	// Warnings, when set, is told what a patch left in the object that its
	// type or schema does not know (unknown, duplicate and pruned fields)
	// when StrictFields is not set, for fieldValidation=Warn: called each
	// time the patch is applied, the last call is for the object written.
	Warnings func(warnings []string)
	// Decoded: the object was finished by the resource's RequestDecoder
	// (the HTTP layer decodes custom objects so), so the store does not
	// decode it again.
	Decoded bool
	// FieldManager is who writes, for the object's managedFields: the
	// request's fieldManager, else the first part of its User-Agent, as
	// kube's handlers name it; an apply's manager.
	FieldManager string
	// Force: an apply takes the fields other managers own (force=true).
	Force bool
	// Tracked: the caller recorded the write in the object's
	// managedFields (the scale subresource: TrackScale, ApplyScale).
	Tracked bool
	// Scale: the write is one of the scale subresource (the parent object
	// is written, and admitted with subresource "scale").
	Scale bool
	// status: the write replaces the status only (UpdateStatus,
	// PatchStatus), prepared and checked with the StatusStrategy.
	status bool
	// finalize: the write replaces a Namespace's spec.finalizers and
	// metadata (Finalize), prepared with kube's finalize strategy.
	finalize bool
	// applied: server-side apply merged the object and its managedFields
	// (apply.go); they are not tracked again.
	applied bool
	// collection: a delete of DeleteCollection, admitted without a name as
	// kube's.
	collection bool
}

// maxWriteAttempts bounds the re-reads of a write that races other writes.
const maxWriteAttempts = 10

// Update replaces the object at namespace/name with obj. The replace must be
// conditional: obj carries the resourceVersion it was read at, or conds an
// If-Match (otherwise 428), unless the store's UnconditionalUpdate allows
// the object (Helm's release records by default; unconditional.go). The
// write is one etcd transaction guarded by the revision the conditions were
// checked against; a stale body version is 409 Conflict, a failed If-Match
// or If-None-Match 412, and nothing is written. With conds.CreateOnly a
// missing object is created (created is true).
func (s *Store) Update(ctx context.Context, namespace, name string, obj Object, conds WriteOptions) (_ Object, created bool, _ error) {
	if obj.GetName() != name {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), name))
	}
	if err := s.checkNamespace(namespace, obj); err != nil {
		return nil, false, err
	}
	if err := s.decodeRequest(obj, conds); err != nil {
		return nil, false, err
	}
	conds.Decoded = true
	unconditional := false
	if v := obj.GetResourceVersion(); v != "" {
		if rev, err := strconv.ParseInt(v, 10, 64); err != nil || rev <= 0 {
			return nil, false, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: send the value read from the server unchanged", v))
		}
	} else if conds.IfMatch == nil && !conds.CreateOnly {
		if !s.unconditional.allows(s.Resource, obj) {
			return nil, false, s.versionRequiredOf(ctx, namespace, name, obj, !s.Resource.AllowCreateOnUpdate)
		}
		unconditional = true
	}

	if managedfields.ValidateManagedFields(obj.GetManagedFields()) != nil {
		// kube's field manager ignores managedFields that do not decode
		// (the stored ones stay): they fail no replace.
		obj.SetManagedFields(nil)
	}
	// With admission that may mutate it, the object is validated once
	// mutated, by prepareUpdate's ValidateUpdate (which covers Validate),
	// as kube validates what its webhooks made of it.
	if s.admitter == nil || !mayMutate(s.admitter, s.Resource) {
		if err := s.validateAlone(obj, false); err != nil {
			return nil, false, err
		}
	}
	if unconditional {
		return s.updateUnconditionally(ctx, namespace, name, obj, conds)
	}
	return s.replace(ctx, namespace, name, conds, func(Object) (Object, error) { return obj, nil })
}

// decodeRequest finishes obj as the resource's RequestDecoder does, unless
// opts say it was.
func (s *Store) decodeRequest(obj Object, opts WriteOptions) error {
	d, ok := s.Resource.Strategy.(RequestDecoder)
	if !ok || opts.Decoded {
		return nil
	}
	_, err := d.DecodeRequest(obj)
	return err
}

// validateAlone runs, before any etcd call, the checks of a new object that
// need no stored state — its metadata (name, labels, annotations, ...) and
// its kind's own rules (data keys, sizes) — so that bad input is answered
// 422 whatever etcd is doing. prepareUpdate checks everything again with
// the stored object. A replacement (create false) of a resource whose
// Strategy.Validate is for creates only (Resource.ValidateCreatesOnly) has
// its metadata checked only.
func (s *Store) validateAlone(obj Object, create bool) error {
	errs := apivalidation.ValidateObjectMetaAccessor(obj, s.Resource.Namespaced, s.Resource.NameValidation, field.NewPath("metadata"))
	if create || !s.Resource.ValidateCreatesOnly {
		errs = append(errs, s.Resource.Strategy.Validate(obj)...)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(s.Resource.GroupVersionKind().GroupKind(), obj.GetName(), errs)
	}
	return nil
}

// replace is the write loop of Update and Patch: read the object, check
// conds against its revision, build the new object from it, and write it
// with one etcd transaction guarded by that revision. A new object that
// carries a resourceVersion other than the stored one is a 409 Conflict.
// When another write lands first, the loop reads again and rebuilds, so
// header conditions and patches always apply to the current state.
func (s *Store) replace(ctx context.Context, namespace, name string, opts WriteOptions, build func(old Object) (Object, error)) (_ Object, created bool, _ error) {
	gr := s.Resource.GroupResource()
	for attempt := range maxWriteAttempts {
		// The first attempt may start from the remembered state. Only a
		// guarded write can confirm that state was current, so any other
		// outcome from it (a refusal, "unchanged", a dry run) is decided
		// again from etcd — except a write etcd may have applied, whose
		// re-read could find its own result.
		stored, old, remembered, err := s.readForWrite(ctx, namespace, name, attempt == 0 && !opts.CreateOnly && !opts.DryRun)
		// A status or finalize write never creates the object (UpdateStatus,
		// Finalize); an apply does (Apply).
		if errors.Is(err, etcdstore.ErrNotFound) && (opts.CreateOnly || opts.applied) && !opts.status && !opts.finalize {
			obj, err := build(nil)
			if err != nil {
				return nil, false, err
			}
			out, err := s.Create(ctx, namespace, obj, opts)
			if apierrors.IsAlreadyExists(err) {
				continue // created meanwhile: check again, now against it
			}
			return out, err == nil, err
		}
		if err != nil {
			return nil, false, StatusError(err, gr, name)
		}
		out, wrote, err := s.replaceFrom(ctx, namespace, name, opts, build, stored, old)
		if errors.Is(err, errRaced) || (remembered && !wrote && !isOutcomeUnknown(err) && !s.confirmed(ctx, namespace, name, stored.Revision)) {
			continue
		}
		return out, false, err
	}
	return nil, false, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
}

// errRaced: another write landed between a write's read and its guarded
// transaction; the write reads again.
var errRaced = errors.New("registry: the object changed during the write")

// replaceFrom decides one replace attempt from the stored state and, if it
// stands, writes it with a transaction guarded by stored's revision. wrote
// reports a write (or deletion) that etcd confirmed.
func (s *Store) replaceFrom(ctx context.Context, namespace, name string, opts WriteOptions, build func(old Object) (Object, error), stored etcdstore.Object, old Object) (_ Object, wrote bool, _ error) {
	gr := s.Resource.GroupResource()
	current := formatRevision(stored.Revision)
	if opts.CreateOnly || (opts.IfNoneMatch != nil && opts.IfNoneMatch(current)) {
		return nil, false, newPreconditionFailed(gr, name, "If-None-Match", current)
	}
	if opts.IfMatch != nil && !opts.IfMatch(current) {
		return nil, false, newPreconditionFailed(gr, name, "If-Match", current)
	}
	obj, err := build(old)
	if err != nil {
		return nil, false, err
	}
	if rv := obj.GetResourceVersion(); rv != "" && rv != current {
		return nil, false, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
	}
	strategy := s.updateStrategy(opts)
	next, err := s.prepareUpdate(ctx, obj, old, strategy, opts)
	if err != nil {
		return nil, false, err
	}
	if ws, ok := strategy.(WarningStrategy); ok {
		addWarnings(ctx, ws.WarningsOnUpdate(next, old))
	}
	plaintext, err := s.serialize(next)
	if err != nil {
		return nil, false, err
	}
	storedPlaintext, stale, err := s.unseal(s.keyOf(namespace, name), stored.Value)
	if err != nil {
		return nil, false, err
	}
	// A value stored with an older key or provider is rewritten even when
	// the object is unchanged, as kube-apiserver does; otherwise an update
	// that changes nothing writes nothing.
	if !stale && bytes.Equal(plaintext, storedPlaintext) {
		return copyObject(old), false, nil
	}
	value, err := s.seal(s.keyOf(namespace, name), plaintext)
	if err != nil {
		return nil, false, err
	}
	if opts.DryRun {
		return next, false, nil
	}
	key := s.recentKey(namespace, name)
	if next.GetDeletionTimestamp() != nil && finalized(next) {
		// The last finalizer is gone from an object being deleted: it is
		// deleted now, in the same guarded transaction.
		delRev, err := s.storage.Delete(ctx, s.ref(namespace, name), stored.Revision)
		if err != nil {
			return nil, false, s.writeError(err, name)
		}
		s.recent.drop(key, delRev)
		return next, true, nil
	}
	newRev, err := s.storage.Update(ctx, s.ref(namespace, name), value, stored.Revision)
	if dropManagedFields(err, next, opts) {
		if value, err = s.encode(s.keyOf(namespace, name), next); err != nil {
			return nil, false, err
		}
		newRev, err = s.storage.Update(ctx, s.ref(namespace, name), value, stored.Revision)
	}
	if err != nil {
		return nil, false, s.writeError(err, name)
	}
	next.SetResourceVersion(formatRevision(newRev))
	s.recent.putWritten(key, etcdstore.Object{Value: value, Revision: newRev}, copyObject(next), s.Resource.Storage == nil)
	return next, true, nil
}

// writeError maps a guarded write's storage error: a lost race is errRaced
// (read again), anything else a Status.
func (s *Store) writeError(err error, name string) error {
	if errors.Is(err, etcdstore.ErrConflict) {
		return errRaced
	}
	return StatusError(err, s.Resource.GroupResource(), name)
}

// recentKey is how an object is known in s.recent.
func (s *Store) recentKey(namespace, name string) string {
	ref := s.ref(namespace, name)
	return ref.Namespace + "/" + ref.Name
}

// readForWrite returns the stored state a write starts from: the remembered
// one when allowed and known (remembered is then true), else a
// linearizable read of etcd. The returned object is shared: do not mutate it.
func (s *Store) readForWrite(ctx context.Context, namespace, name string, allowRemembered bool) (stored etcdstore.Object, obj Object, remembered bool, err error) {
	key := s.recentKey(namespace, name)
	if allowRemembered {
		if e, ok := s.recent.get(key); ok {
			if e.obj == nil { // remembered from a JSON read: decode it now
				if e.obj, err = s.decode(s.keyOf(namespace, name), e.stored); err != nil {
					return etcdstore.Object{}, nil, false, err
				}
				s.recent.put(key, e.stored, e.obj)
			}
			return e.stored, e.obj, true, nil
		}
	}
	stored, err = s.storage.Get(ctx, s.ref(namespace, name), 0)
	if err != nil {
		return etcdstore.Object{}, nil, false, err
	}
	if obj, err = s.decode(s.keyOf(namespace, name), stored); err != nil {
		return etcdstore.Object{}, nil, false, err
	}
	s.recent.put(key, stored, obj)
	return stored, obj, false, nil
}

// copyObject returns a copy that callers may change.
func copyObject(obj Object) Object {
	return obj.DeepCopyObject().(Object)
}

// prepareUpdate checks obj as a replacement of old and carries over what the
// system owns, with strategy (the resource's, or its StatusStrategy for a
// status write), once its managedFields record the write. It works on a
// copy, so a retried write starts from the client's object again.
func (s *Store) prepareUpdate(ctx context.Context, in, old Object, strategy UpdateStrategy, opts WriteOptions) (Object, error) {
	obj, ok := in.DeepCopyObject().(Object)
	if !ok {
		return nil, fmt.Errorf("copy of %T is not an Object", in)
	}
	s.Resource.defaultRequest(obj, old)
	obj, err := s.trackUpdate(old, obj, opts)
	if err != nil {
		return nil, err
	}
	// Mutating admission sees the client's object (patched, applied) with
	// its managedFields, before the stored metadata is carried over.
	if obj, err = s.mutate(ctx, admission.Update, old.GetNamespace(), old.GetName(), obj, old, opts); err != nil {
		return nil, err
	}
	gr := s.Resource.GroupResource()
	if uid := obj.GetUID(); uid != "" && uid != old.GetUID() {
		return nil, apierrors.NewConflict(gr, obj.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", uid, old.GetUID()))
	}
	obj.SetResourceVersion(old.GetResourceVersion())
	obj.SetUID(old.GetUID())
	obj.SetCreationTimestamp(old.GetCreationTimestamp())
	obj.SetDeletionTimestamp(old.GetDeletionTimestamp())
	obj.SetDeletionGracePeriodSeconds(old.GetDeletionGracePeriodSeconds())
	obj.SetGeneration(old.GetGeneration())
	if err := s.admit(ctx, obj, old); err != nil {
		return nil, err
	}
	strategy.PrepareForUpdate(obj, old)
	errs := apivalidation.ValidateObjectMetaAccessor(obj, s.Resource.Namespaced, s.Resource.NameValidation, field.NewPath("metadata"))
	errs = append(errs, apivalidation.ValidateObjectMetaAccessorUpdate(obj, old, field.NewPath("metadata"))...)
	if v, ok := strategy.(contextUpdateValidator); ok {
		errs = append(errs, v.validateUpdateContext(ctx, obj, old)...)
	} else {
		errs = append(errs, strategy.ValidateUpdate(obj, old)...)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(s.Resource.GroupVersionKind().GroupKind(), obj.GetName(), errs)
	}
	if err := s.validateAdmission(ctx, admission.Update, old.GetNamespace(), old.GetName(), obj, old, opts); err != nil {
		return nil, err
	}
	return obj, nil
}

// Delete removes namespace/name if conds (If-Match, If-None-Match: 412)
// and opts' preconditions (uid, resourceVersion: 409) hold. The delete is
// one etcd transaction on the revision they were checked against; if
// another write lands in between, it re-reads and checks again.
func (s *Store) Delete(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions, conds WriteOptions) (runtime.Object, error) {
	if IgnoresReadErrors(opts) { // a value that cannot be read (corrupt.go)
		return s.deleteCorrupt(ctx, namespace, name, conds)
	}
	if s.Resource.IsNamespace {
		return s.deleteNamespace(ctx, name, opts, conds)
	}
	gr := s.Resource.GroupResource()
	for attempt := range maxWriteAttempts {
		// As in replace: a remembered state may only end in a confirmed
		// write or an unknown outcome; any other is decided again from etcd.
		stored, shared, remembered, err := s.readForWrite(ctx, namespace, name, attempt == 0 && !conds.DryRun)
		if err != nil {
			return nil, StatusError(err, gr, name)
		}
		out, wrote, err := s.deleteFrom(ctx, namespace, name, opts, conds, stored, shared)
		if errors.Is(err, errRaced) || (remembered && !wrote && !isOutcomeUnknown(err) && !s.confirmed(ctx, namespace, name, stored.Revision)) {
			continue
		}
		return out, err
	}
	return nil, apierrors.NewConflict(gr, name, errors.New(OptimisticLockErrorMsg))
}

// deleteFrom decides one delete attempt from the stored state and carries it
// out with a transaction guarded by stored's revision; wrote reports a
// deletion (or marking) that etcd confirmed.
func (s *Store) deleteFrom(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions, conds WriteOptions, stored etcdstore.Object, shared Object) (_ runtime.Object, wrote bool, _ error) {
	gr := s.Resource.GroupResource()
	if err := s.checkDelete(stored, shared, opts, conds); err != nil {
		return nil, false, err
	}
	if err := s.admitDelete(ctx, shared, opts, conds); err != nil {
		return nil, false, err
	}
	obj := copyObject(shared)
	m, marker := s.Resource.Strategy.(DeleteMarker)
	if marker && obj.GetDeletionTimestamp() == nil {
		m.MarkForDeletion(obj) // adds the finalizer of the resource's own cleanup
	}
	// The propagation policy becomes the garbage collector's finalizers, also
	// on an object being deleted already (kube switches them there too).
	changed, finalizers := gcFinalizers(obj, opts)
	if changed {
		obj.SetFinalizers(finalizers)
	}
	if len(obj.GetFinalizers()) > 0 {
		// Finalizers hold the object: it is only marked as being deleted;
		// the update that removes the last one deletes it.
		if obj.GetDeletionTimestamp() != nil && !changed {
			return obj, false, nil
		}
		if obj.GetDeletionTimestamp() == nil {
			now, zero := metav1.NewTime(time.Now().Truncate(time.Second)), int64(0)
			obj.SetDeletionTimestamp(&now)
			obj.SetDeletionGracePeriodSeconds(&zero)
			// As kube's markAsDeleting; kube's own delete of a CRD (the
			// marker) keeps the generation, which says its spec changed.
			if g := obj.GetGeneration(); g > 0 && !marker {
				obj.SetGeneration(g + 1)
			}
		}
		if conds.DryRun {
			return obj, false, nil // what the marking would store
		}
		value, err := s.encode(s.keyOf(namespace, name), obj)
		if err != nil {
			return nil, false, err
		}
		rev, err := s.storage.Update(ctx, s.ref(namespace, name), value, stored.Revision)
		if err != nil {
			return nil, false, s.writeError(err, name)
		}
		obj.SetResourceVersion(formatRevision(rev))
		return obj, true, nil
	}
	if !conds.DryRun {
		delRev, err := s.storage.Delete(ctx, s.ref(namespace, name), stored.Revision)
		if err != nil {
			return nil, false, s.writeError(err, name)
		}
		s.recent.drop(s.recentKey(namespace, name), delRev)
		wrote = true
	}
	return &metav1.Status{
		Status:  metav1.StatusSuccess,
		Details: &metav1.StatusDetails{Name: name, Group: gr.Group, Kind: gr.Resource, UID: obj.GetUID()},
	}, wrote, nil
}

// DeleteMarker is implemented by the Strategy of a resource whose objects
// are never removed by a delete at once: the delete marks the object
// (deletionTimestamp) after MarkForDeletion has added the finalizer of the
// resource's own cleanup (and whatever status says so), in the same
// guarded write; the cleanup removes the finalizer when it is done, and
// that write deletes the object. kube-apiserver does this for CRDs (their
// custom objects are deleted first).
type DeleteMarker interface {
	MarkForDeletion(obj Object)
}

// checkDelete checks a delete's HTTP conditions (412) and DeleteOptions
// preconditions (409) against the stored object.
func (s *Store) checkDelete(stored etcdstore.Object, obj Object, opts *metav1.DeleteOptions, conds WriteOptions) error {
	gr := s.Resource.GroupResource()
	current := formatRevision(stored.Revision)
	if conds.IfMatch != nil && !conds.IfMatch(current) {
		return newPreconditionFailed(gr, obj.GetName(), "If-Match", current)
	}
	if conds.IfNoneMatch != nil && conds.IfNoneMatch(current) {
		return newPreconditionFailed(gr, obj.GetName(), "If-None-Match", current)
	}
	// After the object is read, as kube's BeforeDelete: a missing object is
	// 404 whatever the options say.
	if err := validateDeleteOptions(opts); err != nil {
		return err
	}
	if err := checkPreconditions(opts, obj); err != nil {
		return apierrors.NewConflict(gr, obj.GetName(), err)
	}
	return nil
}

func checkPreconditions(opts *metav1.DeleteOptions, obj Object) error {
	if opts == nil || opts.Preconditions == nil {
		return nil
	}
	p := opts.Preconditions
	if p.UID != nil && *p.UID != obj.GetUID() {
		return fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, obj.GetUID())
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != obj.GetResourceVersion() {
		return fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, obj.GetResourceVersion())
	}
	return nil
}

// checkNamespace fills an empty namespace from the URL and refuses a
// different one, as kube-apiserver's BeforeCreate and BeforeUpdate do.
func (s *Store) checkNamespace(namespace string, obj Object) error {
	if !s.Resource.Namespaced {
		obj.SetNamespace("")
		return nil
	}
	switch obj.GetNamespace() {
	case "":
		obj.SetNamespace(namespace)
	case namespace:
	default:
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// encode is what is stored for obj at key (its storageKey): the object
// serialized, then encrypted if its resource is (seal).
func (s *Store) encode(key string, obj Object) ([]byte, error) {
	plaintext, err := s.serialize(obj)
	if err != nil {
		return nil, err
	}
	return s.seal(key, plaintext)
}

// serialize is obj as JSON with apiVersion and kind, without
// resourceVersion, in the stored version (converted when the resource is
// served in another: Resource.Storage).
func (s *Store) serialize(obj Object) ([]byte, error) {
	obj.GetObjectKind().SetGroupVersionKind(s.Resource.GroupVersionKind())
	if conv := s.Resource.Storage; conv != nil {
		stored, err := conv.ToStored(obj)
		if err != nil {
			return nil, fmt.Errorf("convert %s %s to %s: %w", s.Resource.GroupVersionKind(), obj.GetName(), conv.Of.GroupVersion, err)
		}
		obj = stored
	}
	obj.GetObjectKind().SetGroupVersionKind(s.Resource.stored().GroupVersionKind())
	rv := obj.GetResourceVersion()
	obj.SetResourceVersion("")
	defer obj.SetResourceVersion(rv)
	buf := serializeBuffers.Get().(*bytes.Buffer)
	defer serializeBuffers.Put(buf)
	buf.Reset()
	if err := encodeJSON(obj, buf); err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", s.Resource.Kind, obj.GetName(), err)
	}
	return bytes.Clone(buf.Bytes()), nil
}

// serializeBuffers are the encoding buffers of serialize: one exact copy per
// value instead of a buffer grown from nothing each time.
var serializeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// decode reads the object stored at key (its storageKey): decrypted
// (unseal), then deserialized.
func (s *Store) decode(key string, stored etcdstore.Object) (Object, error) {
	plaintext, _, err := s.unseal(key, stored.Value)
	if err != nil {
		return nil, s.corrupt(key, stored, untransformable, err)
	}
	// The type is known, so unmarshal straight into it, as apimachinery's
	// JSON serializer does after first parsing the whole value once more
	// only to read apiVersion and kind.
	storedAs := s.Resource.stored()
	obj := storedAs.New()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(plaintext, obj); err != nil {
		return nil, s.corrupt(key, stored, undecodable, fmt.Errorf("decode stored %s: %w", s.Resource.Kind, err))
	}
	if read := s.Resource.ReadStored; read != nil {
		if obj, err = read(obj); err != nil {
			return nil, s.corrupt(key, stored, undecodable, fmt.Errorf("decode stored %s: %w", s.Resource.Kind, err))
		}
	} else if gvk := obj.GetObjectKind().GroupVersionKind(); gvk != storedAs.GroupVersionKind() {
		return nil, s.corrupt(key, stored, undecodable, fmt.Errorf("decode stored %s: the value is a %s", s.Resource.Kind, gvk))
	} else if conv := s.Resource.Storage; conv != nil {
		served, err := conv.FromStored(obj)
		if err != nil {
			return nil, s.corrupt(key, stored, undecodable, fmt.Errorf("convert stored %s to %s: %w", storedAs.GroupVersionKind(), s.Resource.GroupVersion, err))
		}
		obj = served
		obj.GetObjectKind().SetGroupVersionKind(s.Resource.GroupVersionKind())
	}
	obj.SetResourceVersion(formatRevision(stored.Revision))
	return obj, nil
}

// formatRevision is how an etcd revision reads as a resourceVersion.
func formatRevision(rev int64) string { return strconv.FormatInt(rev, 10) }

// SetAdmission makes check decide, before validation (as kube's RBAC
// storage), whether a create (old nil) or replace of this resource may be
// written: the checks that need to know who writes (RBAC's escalation
// prevention, package rbac). Its error is answered as it is. Set it
// before the store serves.
func (s *Store) SetAdmission(check func(ctx context.Context, obj, old Object) error) {
	s.admission = check
}

func (s *Store) admit(ctx context.Context, obj, old Object) error {
	if s.admission == nil {
		return nil
	}
	return s.admission(ctx, obj, old)
}

// Decode reads a value of this resource as stored at key (namespace/name,
// or name; relative to the resource's keys), for a reader that watches
// etcd itself (package rbac's view): decrypted and checked as every read.
func (s *Store) Decode(key string, stored etcdstore.Object) (Object, error) {
	return s.decode(s.Resource.storagePrefix()+"/"+key, stored)
}

// CurrentRevision is at least etcd's revision when it was called, from a
// quorum read shared with the concurrent reads of every store of NewStores.
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	return s.revisions.read(ctx)
}
