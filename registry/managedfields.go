package registry

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/concord-dev/concord/etcdstore"
	"github.com/concord-dev/concord/registry/openapidefs"
)

// managedFields are tracked as kube-apiserver 1.37 tracks them, by its own
// library (k8s.io/apimachinery/pkg/util/managedfields): every create,
// replace and patch records what its manager (WriteOptions.FieldManager)
// changed as an Update entry, status and scale writes with their
// subresource, and server-side apply (apply.go) merges by the same field
// managers.

// ServerFieldManager is the manager of the writes the server makes itself
// (the CRDs' names, conditions and cleanup, the system namespaces), named
// as kube-apiserver's own controllers are in managedFields.
const ServerFieldManager = "kube-apiserver"

// fieldManagers are the field managers of one resource's objects: one per
// subresource written, as kube-apiserver has one per REST storage. The
// scale subresource's merges autoscaling/v1 Scales (scale_managedfields.go).
type fieldManagers struct {
	main, status, scale, finalize *managedfields.FieldManager
	// types is what they all type objects by (applyStatus); merge the
	// same types keeping managedFields (TypeConverter).
	types, merge managedfields.TypeConverter
}

// mergeTypes are what a resource's field managers merge and convert
// objects by.
type mergeTypes struct {
	converter managedfields.TypeConverter
	convertor runtime.ObjectConvertor
	defaulter runtime.ObjectDefaulter
	creater   runtime.ObjectCreater
	// custom: the types are a CRD's (kube's CRD field manager).
	custom bool
}

// newFieldManagers builds res's field managers, with kube's reset fields:
// those a strategy resets whatever a write says are nobody's.
func newFieldManagers(res *Resource) (*fieldManagers, error) {
	var t mergeTypes
	if s, ok := res.Strategy.(*customResourceStrategy); ok {
		t = *s.def.mergeTypes() // shared by the CRD's versions: copied
	} else {
		converter, err := builtInTypeConverter()
		if err != nil {
			return nil, err
		}
		t = mergeTypes{converter: converter, convertor: builtInConvertor{Scheme}, defaulter: Scheme, creater: Scheme}
	}
	merge := t.converter
	t.converter = untrackedConverter{t.converter}
	newManager := managedfields.NewDefaultFieldManager
	if t.custom {
		newManager = managedfields.NewDefaultCRDFieldManager
	}
	gvk := res.GroupVersionKind()
	build := func(subresource string, reset []string) (*managedfields.FieldManager, error) {
		m, err := newManager(t.converter, t.convertor, t.defaulter, t.creater, gvk, gvk.GroupVersion(), subresource, resetFilter(gvk.GroupVersion(), reset))
		if err != nil {
			return nil, fmt.Errorf("registry: the field manager of %s: %w", res.GroupResource(), err)
		}
		return m, nil
	}
	m := &fieldManagers{types: t.converter, merge: merge}
	var err error
	if m.main, err = build("", res.ResetFields); err != nil {
		return nil, err
	}
	if res.StatusStrategy != nil {
		if m.status, err = build("status", res.StatusResetFields); err != nil {
			return nil, err
		}
	}
	if res.IsNamespace {
		if m.finalize, err = build("finalize", []string{"status"}); err != nil {
			return nil, err
		}
	}
	if _, ok := res.Scale(); ok {
		// kube's: typed by the CRD's models, which hold the Scale.
		if m.scale, err = managedfields.NewDefaultCRDFieldManager(t.converter, builtInConvertor{Scheme}, Scheme, Scheme, scaleGVK, scaleGVK.GroupVersion(), "scale", nil); err != nil {
			return nil, fmt.Errorf("registry: the scale field manager of %s: %w", res.GroupResource(), err)
		}
	}
	return m, nil
}

// resetFilter excludes the top-level fields reset of gv's managed fields.
func resetFilter(gv schema.GroupVersion, reset []string) map[fieldpath.APIVersion]fieldpath.Filter {
	if len(reset) == 0 {
		return nil
	}
	set := fieldpath.NewSet()
	for _, f := range reset {
		set.Insert(fieldpath.MakePathOrDie(f))
	}
	return fieldpath.NewExcludeFilterSetMap(map[fieldpath.APIVersion]*fieldpath.Set{fieldpath.APIVersion(gv.String()): set})
}

// fieldManager is the field manager of a write with opts: the status
// subresource's, a Namespace's finalize one, or the resource's.
func (s *Store) fieldManager(opts WriteOptions) (*managedfields.FieldManager, error) {
	m, err := s.fields()
	if err != nil {
		return nil, err
	}
	if opts.status {
		return m.status, nil
	}
	if opts.finalize {
		return m.finalize, nil
	}
	return m.main, nil
}

// trackUpdate records in obj's managedFields what opts' manager changed
// from live (nil for a create), as kube's handlers do before the strategy
// runs (UpdateNoErrors: a failure keeps live's). An apply has done so, and
// so has a write of the scale subresource (opts.Tracked).
func (s *Store) trackUpdate(live, obj Object, opts WriteOptions) (Object, error) {
	if opts.applied || opts.Tracked {
		return obj, nil
	}
	m, err := s.fieldManager(opts)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if live == nil {
		live = s.Resource.New()
	}
	out, ok := m.UpdateNoErrors(live, obj, opts.FieldManager).(Object)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("registry: the field manager of %s returned no object", s.Resource.GroupResource()))
	}
	storedTimes(out)
	return out, nil
}

// dropManagedFields drops obj's managedFields when etcd refused its write
// (err) as too large, for the write to be sent again without them, as kube
// does but for an apply: they may double the size of an object of many
// fields. Only a definite refusal is sent again: a write whose outcome is
// unknown may have landed (etcdstore's outcome.go classifies too-large
// refusals as definite; this keeps it so should the two ever disagree).
func dropManagedFields(err error, obj Object, opts WriteOptions) bool {
	if !errors.Is(err, etcdstore.ErrTooLarge) || errors.Is(err, etcdstore.ErrUnknownOutcome) || opts.applied || obj.GetManagedFields() == nil {
		return false
	}
	obj.SetManagedFields(nil)
	return true
}

// storedTimes truncates the managedFields times to the second, as they are
// stored (JSON and protobuf keep seconds), so that a write answers the
// object it stored. A custom object holds them as strings of seconds
// already.
func storedTimes(obj Object) {
	if _, ok := obj.(*unstructured.Unstructured); ok {
		return
	}
	entries := obj.GetManagedFields()
	changed := false
	for i, e := range entries {
		if e.Time != nil && e.Time.Nanosecond() != 0 {
			entries[i].Time = &metav1.Time{Time: e.Time.Truncate(time.Second)}
			changed = true
		}
	}
	if changed {
		obj.SetManagedFields(entries)
	}
}

// untrackedConverter types objects without their managedFields, which no
// managed set holds (kube's field manager strips them from every set, and
// an applied object may not carry any), so the field manager answers as
// it would with them; walking them was a quarter of its cost.
type untrackedConverter struct{ managedfields.TypeConverter }

func (c untrackedConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	return c.TypeConverter.ObjectToTyped(withoutManagedFields(obj), opts...)
}

// withoutManagedFields is obj, or a shallow copy of it without
// managedFields: obj is not written to, the stored objects the field
// managers read are shared.
func withoutManagedFields(obj runtime.Object) runtime.Object {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		metadata, ok := u.Object["metadata"].(map[string]any)
		if !ok || metadata["managedFields"] == nil {
			return obj
		}
		out := &unstructured.Unstructured{Object: maps.Clone(u.Object)}
		metadata = maps.Clone(metadata)
		delete(metadata, "managedFields")
		out.Object["metadata"] = metadata
		return out
	}
	accessor, err := meta.Accessor(obj)
	v := reflect.ValueOf(obj)
	if err != nil || accessor.GetManagedFields() == nil || v.Kind() != reflect.Pointer {
		return obj
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	out := c.Interface().(runtime.Object)
	if a, err := meta.Accessor(out); err == nil {
		a.SetManagedFields(nil)
	}
	return out
}

// builtInTypeConverter is the types of the built-in resources, from their
// OpenAPI definitions, as kube-apiserver builds them for server-side apply.
var builtInTypeConverter = sync.OnceValues(func() (managedfields.TypeConverter, error) {
	var objs []runtime.Object
	defined := openapidefs.Names()
	for _, r := range Resources {
		if obj := r.New(); defined[openapidefs.Name(obj)] {
			objs = append(objs, obj)
		}
	}
	models, err := openapidefs.Models(openapidefs.NewNamer(Scheme), objs...)
	if err != nil {
		return nil, fmt.Errorf("registry: the OpenAPI models of the built-in resources: %w", err)
	}
	return managedfields.NewTypeConverter(models, false)
})

// builtInConvertor converts the objects the field managers of built-in
// resources compare: with the scheme, and between the versions a
// StorageVersion serves (core/v1 and events.k8s.io/v1 Events), which kube
// converts through its internal version.
type builtInConvertor struct{ *runtime.Scheme }

// ConvertToVersion leaves a typed object already in target as it is,
// unwritten: the stored objects the field managers read are shared.
func (c builtInConvertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	gvk := in.GetObjectKind().GroupVersionKind()
	if _, ok := in.(runtime.Unstructured); !ok && !gvk.Empty() {
		if to, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{gvk}); ok && to == gvk {
			return in, nil
		}
	}
	out, err := c.Scheme.UnsafeConvertToVersion(in, target)
	if !runtime.IsNotRegisteredError(err) {
		return out, err
	}
	inTyped, terr := c.Scheme.UnsafeConvertToVersion(in, gvk.GroupVersion())
	obj, ok := inTyped.(Object)
	if terr != nil || !ok {
		return nil, err
	}
	for _, r := range Resources {
		sv := r.Storage
		if sv == nil {
			continue
		}
		var convert func(Object) (Object, error)
		var to schema.GroupVersionKind
		switch gvk {
		case r.GroupVersionKind():
			convert, to = sv.ToStored, sv.Of.GroupVersionKind()
		case sv.Of.GroupVersionKind():
			convert, to = sv.FromStored, r.GroupVersionKind()
		default:
			continue
		}
		if _, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{to}); !ok {
			continue
		}
		converted, cerr := convert(obj)
		if cerr != nil {
			return nil, cerr
		}
		converted.GetObjectKind().SetGroupVersionKind(to)
		return converted, nil
	}
	return nil, err
}

// TypeConverter is what the resource's objects are typed by for a
// structured merge, as server-side apply merges them: admission policies'
// ApplyConfiguration mutations merge by it (apiserver/admission).
func (s *Store) TypeConverter() (managedfields.TypeConverter, error) {
	m, err := s.fields()
	if err != nil {
		return nil, err
	}
	return m.merge, nil
}
