package registry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/etcdstore"
)

// maxPageSize bounds how many keys one read fetches while filling a page
// whose selector skips objects (kube-apiserver's value).
const maxPageSize = 10000

// defaultSelectableFields are the fields a fieldSelector may name for a
// resource that declares none (kube's ObjectMetaFieldsSet).
var defaultSelectableFields = []string{"metadata.name", "metadata.namespace"}

// filter is a list or watch's label and field selection.
type filter struct {
	labels labels.Selector
	fields fields.Selector
	// fieldSet gives an object's selectable fields (Resource.FieldSet).
	fieldSet func(Object) fields.Set
}

// newFilter checks the field selector against the fields res declares
// selectable: an unknown one is kube's 400, "field label not supported"
// for a resource that declares its fields, and the default conversion's
// message naming the two metadata fields otherwise.
func newFilter(res *Resource, opts *metainternalversion.ListOptions) (filter, error) {
	f := filter{labels: opts.LabelSelector, fields: opts.FieldSelector, fieldSet: res.FieldSet}
	if f.labels == nil {
		f.labels = labels.Everything()
	}
	if f.fields == nil {
		f.fields = fields.Everything()
	}
	if f.fieldSet == nil {
		f.fieldSet = func(obj Object) fields.Set {
			return fields.Set{"metadata.name": obj.GetName(), "metadata.namespace": obj.GetNamespace()}
		}
	}
	for _, req := range f.fields.Requirements() {
		if res.SelectableFields == nil && !slices.Contains(defaultSelectableFields, req.Field) {
			return filter{}, apierrors.NewBadRequest(fmt.Sprintf("%q is not a known field selector: only %q, %q", req.Field, defaultSelectableFields[0], defaultSelectableFields[1]))
		}
		if res.SelectableFields != nil && !slices.Contains(res.SelectableFields, req.Field) {
			return filter{}, apierrors.NewBadRequest("field label not supported: " + req.Field)
		}
	}
	return f, nil
}

func (f filter) everything() bool { return f.labels.Empty() && f.fields.Empty() }

func (f filter) matches(obj Object) bool {
	if !f.labels.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	return f.fields.Empty() || f.fields.Matches(f.fieldSet(obj))
}

// validateListOptions applies kube-apiserver's ListOptions validation (422
// Invalid of kind ListOptions) and selector checks (400).
func validateListOptions(res *Resource, opts *metainternalversion.ListOptions) (filter, error) {
	if errs := validation.ValidateListOptions(opts, true); len(errs) > 0 {
		return filter{}, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	return newFilter(res, opts)
}

func parseResourceVersion(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: send a value read from the server unchanged", rv))
	}
	return n, nil
}

// List reads the objects of namespace (all namespaces when empty) as one
// consistent snapshot, with kube-apiserver's resourceVersion, limit/continue
// and selector semantics. The list's resourceVersion is the etcd revision
// the snapshot was read at.
func (s *Store) List(ctx context.Context, namespace string, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	plan, err := planList(s.Resource, opts)
	if err != nil {
		return nil, err
	}
	var items []runtime.Object
	rev, token, remaining, err := s.listPages(ctx, namespace, opts, plan, func(key string, stored etcdstore.Object, cached *cacheEntry) (bool, error) {
		obj, err := s.listed(key, stored, cached)
		if err != nil {
			return false, err
		}
		if !plan.filter.matches(obj) {
			return false, nil
		}
		items = append(items, obj)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return s.newList(items, rev, token, remaining)
}

// listed is the object a list reads at key: the cache's (shared: the list
// only reads it), or decoded from stored.
func (s *Store) listed(key string, stored etcdstore.Object, cached *cacheEntry) (Object, error) {
	if cached != nil {
		return cached.decode(s)
	}
	return s.decode(key, stored)
}

// listPlan is what a list's options mean for the reads.
type listPlan struct {
	filter filter
	// readRev 0 reads the latest state; minRev is what that state must reach.
	readRev, minRev, rv int64
	start               string
}

// planList validates a list's options and works out what to read, with
// kube-apiserver's resourceVersion, limit and continue semantics.
func planList(res *Resource, opts *metainternalversion.ListOptions) (listPlan, error) {
	f, err := validateListOptions(res, opts)
	if err != nil {
		return listPlan{}, err
	}
	// A page holds at most maxPageSize objects: a larger limit gets that
	// many and a continue token, as the API allows a server to. A negative
	// limit is no limit, as 0 (and as in kube-apiserver).
	opts.Limit = min(max(opts.Limit, 0), maxPageSize)
	rv, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return listPlan{}, err
	}

	// readRev 0 reads the latest state; minRev is what that state must reach.
	var readRev, minRev int64
	var start string
	switch {
	case opts.Continue != "":
		if rv != 0 {
			return listPlan{}, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		if start, readRev, err = decodeContinue(opts.Continue); err != nil {
			return listPlan{}, apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
		}
		if readRev < 0 { // "continue at latest", from a 410 answer
			readRev = 0
		}
	case rv == 0:
	case opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact,
		opts.ResourceVersionMatch == "" && opts.Limit > 0: // legacy: paged lists at N are Exact
		readRev = rv
	default: // NotOlderThan
		minRev = rv
	}
	return listPlan{filter: f, readRev: readRev, minRev: minRev, rv: rv, start: start}, nil
}

// listPages reads pages of the snapshot and hands every stored object to add
// until opts.Limit objects were added (add reports whether it took one). It
// returns the snapshot revision and, for a page that stops early, the
// continue token and (without selectors) the count of objects left. A
// corrupt object add reports is gathered and the list read on, so that it
// fails at the end naming all it cannot read (never a partial list).
func (s *Store) listPages(ctx context.Context, namespace string, opts *metainternalversion.ListOptions, plan listPlan, add func(key string, stored etcdstore.Object, cached *cacheEntry) (bool, error)) (rev int64, token string, remaining *int64, err error) {
	bad := s.newCorruptItems(plan.filter)
	defer func() {
		if err == nil {
			if err = bad.err(); err != nil {
				rev, token, remaining = 0, "", nil
			}
		}
	}()
	readRev, minRev, rv, start, everything := plan.readRev, plan.minRev, plan.rv, plan.start, plan.filter.everything()
	fromCache := s.cache != nil && readRev == 0 && minRev == 0 && start == ""
	var lastKey string
	added := int64(0)
	pageSize := opts.Limit
	for {
		page, err := s.readPage(ctx, namespace, fromCache, etcdstore.ListOptions{Revision: readRev, Limit: pageSize, Start: start})
		if err != nil {
			return 0, "", nil, s.listError(ctx, err, opts, start, rv)
		}
		fromCache = false
		if readRev == 0 {
			if page.Revision < minRev {
				return 0, "", nil, StatusError(&resourceVersionTooLargeError{want: minRev, current: page.Revision}, s.Resource.GroupResource(), "")
			}
			readRev = page.Revision // every further page reads the same snapshot
		}
		n := page.len()
		for i := range n {
			key, listKey, stored, cached := s.pageObject(page, namespace, i)
			took, err := add(key, stored, cached)
			if err != nil {
				if err = bad.add(err); err != nil {
					return 0, "", nil, err
				}
			}
			lastKey = listKey
			if !took {
				continue
			}
			added++
			if opts.Limit > 0 && added == opts.Limit {
				left := page.Remaining + int64(n-1-i)
				if left > 0 {
					token = encodeContinue(lastKey+"\x00", readRev)
					if everything {
						remaining = &left
					}
				}
				return readRev, token, remaining, nil
			}
		}
		if opts.Limit == 0 || page.Remaining == 0 || n == 0 {
			return readRev, "", nil, nil
		}
		// The selector skipped objects: read on, in larger pages.
		start = lastKey + "\x00"
		pageSize = min(pageSize*2, maxPageSize)
	}
}

// listPage is one read of a list: a range of etcd, or the cache's whole
// snapshot of the list (cached; Remaining 0). A token that continues after
// a page from the cache reads etcd at the cache's revision, which etcd
// still holds.
type listPage struct {
	etcdstore.ListResult
	cached []*cacheEntry
}

func (p *listPage) len() int {
	if p.cached != nil {
		return len(p.cached)
	}
	return len(p.Objects)
}

// readPage reads a list's next page: from the cache when fromCache and the
// cache serves, else from etcd.
func (s *Store) readPage(ctx context.Context, namespace string, fromCache bool, opts etcdstore.ListOptions) (*listPage, error) {
	if fromCache {
		objects, rev, ok, err := s.cache.list(ctx, namespace)
		if err != nil {
			return nil, err
		}
		if ok {
			return &listPage{ListResult: etcdstore.ListResult{Revision: rev}, cached: objects}, nil
		}
	}
	res, err := s.storage.List(ctx, s.Resource.storagePrefix(), namespace, opts)
	if err != nil {
		return nil, err
	}
	return &listPage{ListResult: res}, nil
}

// pageObject is the i-th object of page: its storageKey, its key relative
// to the list's prefix (where a continue token starts), the stored object
// and, from the cache, its entry.
func (s *Store) pageObject(page *listPage, namespace string, i int) (key, listKey string, stored etcdstore.Object, cached *cacheEntry) {
	if page.cached == nil {
		stored = page.Objects[i]
		return s.listedKey(namespace, stored), stored.Key, stored, nil
	}
	cached = page.cached[i]
	stored = cached.stored
	// The cache's keys are relative to the resource: namespace/name.
	listKey = stored.Key
	if namespace != "" {
		listKey = strings.TrimPrefix(listKey, namespace+"/")
	}
	return s.Resource.storagePrefix() + "/" + stored.Key, listKey, stored, cached
}

// listError is the Status of a list's page that could not be read from
// storage: what StatusError needs to answer a compacted continue token,
// and etcd's current revision when the list asked for a newer one.
func (s *Store) listError(ctx context.Context, err error, opts *metainternalversion.ListOptions, start string, rv int64) error {
	gr := s.Resource.GroupResource()
	if errors.Is(err, etcdstore.ErrFutureRevision) {
		current, curErr := s.storage.List(ctx, s.Resource.storagePrefix(), "", etcdstore.ListOptions{Limit: 1})
		if curErr != nil {
			return StatusError(curErr, gr, "")
		}
		return StatusError(&resourceVersionTooLargeError{want: rv, current: current.Revision}, gr, "")
	}
	page := &listError{err: err}
	if opts.Continue != "" {
		page.continueFrom = encodeContinue(start, -1)
	}
	return StatusError(page, gr, "")
}

func (s *Store) newList(items []runtime.Object, rev int64, token string, remaining *int64) (runtime.Object, error) {
	list := s.Resource.NewList()
	if err := meta.SetList(list, items); err != nil {
		return nil, fmt.Errorf("set list items: %w", err)
	}
	if err := clearItemsTypeMeta(list); err != nil {
		return nil, err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, fmt.Errorf("list metadata: %w", err)
	}
	listMeta.SetResourceVersion(strconv.FormatInt(rev, 10))
	listMeta.SetContinue(token)
	listMeta.SetRemainingItemCount(remaining)
	return list, nil
}

// clearItemsTypeMeta leaves out the kind and apiVersion of a typed list's
// items, as kube-apiserver's typed lists do (a custom resource's keep them).
// Only items the list holds by value are cleared: they are its own copies of
// the objects, so the cache's keep theirs.
func clearItemsTypeMeta(list runtime.Object) error {
	if _, custom := list.(*unstructured.UnstructuredList); custom {
		return nil
	}
	itemsPtr, err := meta.GetItemsPtr(list)
	if err != nil {
		return fmt.Errorf("list items: %w", err)
	}
	if reflect.TypeOf(itemsPtr).Elem().Elem().Kind() != reflect.Struct {
		return nil
	}
	return meta.EachListItem(list, func(item runtime.Object) error {
		item.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		return nil
	})
}

// DeleteCollection deletes every object of namespace (all when empty) that
// listOpts' selectors match, one guarded delete each, and returns the list
// of what it deleted (or, with finalizers, marked as being deleted).
func (s *Store) DeleteCollection(ctx context.Context, namespace string, listOpts *metainternalversion.ListOptions, delOpts *metav1.DeleteOptions, opts WriteOptions) (runtime.Object, error) {
	// Before anything is read, as kube's deletecollection handler checks them.
	if err := validateDeleteOptions(delOpts); err != nil {
		return nil, err
	}
	listOpts.Limit, listOpts.Continue = 0, ""
	list, err := s.List(ctx, namespace, listOpts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("delete collection: %w", err)
	}
	deleted := make([]runtime.Object, 0, len(items))
	opts.collection = true
	for _, item := range items {
		obj := item.(Object)
		if _, err := s.Delete(ctx, obj.GetNamespace(), obj.GetName(), delOpts, opts); apierrors.IsNotFound(err) {
			continue // deleted meanwhile
		} else if err != nil {
			return nil, err
		}
		deleted = append(deleted, obj)
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, fmt.Errorf("delete collection: %w", err)
	}
	rev, err := strconv.ParseInt(listMeta.GetResourceVersion(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("delete collection: %w", err)
	}
	return s.newList(deleted, rev, "", nil)
}
