package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/concord-dev/concord/registry"
)

// The scale subresource of a custom resource, as kube's ScaleREST
// (apiextensions-apiserver pkg/registry/customresource/etcd.go): an
// autoscaling/v1 Scale read from the object at the CRD's
// specReplicasPath, statusReplicasPath and labelSelectorPath, and written
// back by setting the spec replicas alone.
//
// A write is an ordinary replace of the object (Store.Update), so its
// Strategy validates it (the replicas a non-negative int32) and it is one
// etcd transaction guarded by a revision: the Scale's resourceVersion (409
// when stale), else, with If-Match, the revision the object was read at.
// As every PUT in Concord, a Scale without a resourceVersion or If-Match is
// 428; a PATCH (kubectl scale) needs neither and is applied again when
// another write lands first.

var scaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// scaleOf is kube's scaleFromCustomResource: the Scale of obj, and whether
// obj has spec replicas at all.
func scaleOf(obj registry.Object, sc registry.ScaleSubresource) (*autoscalingv1.Scale, bool, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, false, fmt.Errorf("apiserver: the scale of %T", obj)
	}
	specReplicas, foundSpec, err := unstructured.NestedInt64(u.Object, sc.Path(sc.SpecReplicasPath)...)
	if err != nil {
		return nil, false, err
	}
	statusReplicas, _, err := unstructured.NestedInt64(u.Object, sc.Path(sc.StatusReplicasPath)...)
	if err != nil {
		return nil, false, err
	}
	var selector string
	if sc.LabelSelectorPath != "" {
		if selector, _, err = unstructured.NestedString(u.Object, sc.Path(sc.LabelSelectorPath)...); err != nil {
			return nil, false, err
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: scaleGVK.GroupVersion().String(), Kind: scaleGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name:              u.GetName(),
			Namespace:         u.GetNamespace(),
			UID:               u.GetUID(),
			ResourceVersion:   u.GetResourceVersion(),
			CreationTimestamp: u.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: int32(specReplicas)},
		Status: autoscalingv1.ScaleStatus{Replicas: int32(statusReplicas), Selector: selector},
	}, foundSpec, nil
}

// withReplicas is a copy of obj with its spec replicas set.
func withReplicas(obj registry.Object, sc registry.ScaleSubresource, replicas int32) (*unstructured.Unstructured, error) {
	u := obj.(*unstructured.Unstructured).DeepCopy()
	if err := unstructured.SetNestedField(u.Object, int64(replicas), sc.Path(sc.SpecReplicasPath)...); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return u, nil
}

// scale serves .../{name}/scale.
func (h *resourceHandler) scale(w http.ResponseWriter, r *http.Request, sc registry.ScaleSubresource) {
	var (
		out *autoscalingv1.Scale
		err error
	)
	switch r.Method {
	case http.MethodGet:
		out, err = h.getScale(r.Context(), sc)
	case http.MethodPut:
		out, err = h.updateScale(w, r, sc)
	case http.MethodPatch:
		out, err = h.patchScale(w, r, sc)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(out.ResourceVersion))
	if wantsTable(r) {
		table, err := scaleTable(out, r.URL.Query().Get("includeObject"))
		if err != nil {
			writeError(w, r, err)
			return
		}
		info, _ := serializerFor(runtime.ContentTypeJSON)
		info.MediaType = tableMediaType
		encode(w, r, info, http.StatusOK, table)
		return
	}
	h.writeObject(w, r, http.StatusOK, out)
}

func (h *resourceHandler) getScale(ctx context.Context, sc registry.ScaleSubresource) (*autoscalingv1.Scale, error) {
	obj, err := h.store.Get(ctx, h.namespace, h.name)
	if err != nil {
		return nil, err
	}
	out, found, err := scaleOf(obj, sc)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if !found {
		return nil, apierrors.NewInternalError(fmt.Errorf("the spec replicas field %q does not exist", sc.SpecReplicasPath))
	}
	return out, nil
}

// updateScale is a PUT of a Scale.
func (h *resourceHandler) updateScale(w http.ResponseWriter, r *http.Request, sc registry.ScaleSubresource) (*autoscalingv1.Scale, error) {
	conds, err := writeOptions(r, "UpdateOptions")
	if err != nil {
		return nil, err
	}
	decoded, err := decodeObject(w, r, scaleGVK, r.URL.Query().Get("fieldValidation"))
	if err != nil {
		return nil, err
	}
	in, ok := decoded.(*autoscalingv1.Scale)
	if !ok {
		return nil, fmt.Errorf("apiserver: decoded %T is not a Scale", decoded)
	}
	if in.Name != h.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", in.Name, h.name))
	}
	if in.Namespace != "" && in.Namespace != h.namespace {
		return nil, apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return h.writeScale(r.Context(), sc, conds, false, h.trackedScale(conds, func(*autoscalingv1.Scale) (*autoscalingv1.Scale, error) { return in, nil }))
}

// scalePatchTypes are the patches of a Scale: merge, JSON or server-side
// apply (kube offers no strategic merge patch on a custom resource's
// subresources either).
var scalePatchTypes = []types.PatchType{types.JSONPatchType, types.MergePatchType, types.ApplyYAMLPatchType}

// patchScale is a PATCH of a Scale.
func (h *resourceHandler) patchScale(w http.ResponseWriter, r *http.Request, sc registry.ScaleSubresource) (*autoscalingv1.Scale, error) {
	pt, err := patchType(r, scalePatchTypes)
	if err != nil {
		return nil, err
	}
	conds, err := patchOptions(r, pt)
	if err != nil {
		return nil, err
	}
	patch, err := readBody(w, r)
	if err != nil {
		return nil, err
	}
	if pt == types.JSONPatchType {
		if err := registry.CheckJSONPatch(patch); err != nil {
			return nil, err
		}
	}
	if pt == types.ApplyYAMLPatchType {
		warnings := collectWarnings(&conds, r)
		out, err := h.writeScale(r.Context(), sc, conds, true, func(parent registry.Object, current *autoscalingv1.Scale) (*autoscalingv1.Scale, []metav1.ManagedFieldsEntry, error) {
			return h.store.ApplyScale(parent, current, patch, conds)
		})
		if err == nil {
			warnings(w)
		}
		return out, err
	}
	var warnings []string
	out, err := h.writeScale(r.Context(), sc, conds, true, h.trackedScale(conds, func(current *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
		original, err := json.Marshal(current)
		if err != nil {
			return nil, fmt.Errorf("apiserver: encode a Scale: %w", err)
		}
		patched, err := applyScalePatch(pt, original, patch)
		if err != nil {
			return nil, err
		}
		next := &autoscalingv1.Scale{}
		strictErrs, err := kjson.UnmarshalStrict(patched, next)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the patched object is not a valid Scale: %v", err))
		}
		warnings = warnings[:0]
		for _, e := range strictErrs {
			warnings = append(warnings, e.Error())
		}
		if conds.StrictFields && len(strictErrs) > 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("strict decoding error: %v", errors.Join(strictErrs...)))
		}
		return next, nil
	}))
	if err != nil {
		return nil, err
	}
	if r.URL.Query().Get("fieldValidation") != metav1.FieldValidationIgnore {
		for _, text := range warnings {
			addWarning(w, text)
		}
	}
	return out, nil
}

func applyScalePatch(pt types.PatchType, original, patch []byte) ([]byte, error) {
	switch pt {
	case types.JSONPatchType:
		ops, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		patched, err := ops.Apply(original)
		if err != nil {
			return nil, statusError(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "the JSON patch does not apply: "+err.Error())
		}
		return patched, nil
	default:
		patched, err := jsonpatch.MergePatch(original, patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return patched, nil
	}
}

// maxScaleAttempts bounds how often a Scale write reads the object again
// because another write landed first.
const maxScaleAttempts = 10

// scaleWrite makes the Scale a write stores from the object's current
// one, and the object's managedFields with it.
type scaleWrite func(parent registry.Object, current *autoscalingv1.Scale) (*autoscalingv1.Scale, []metav1.ManagedFieldsEntry, error)

// trackedScale is the scaleWrite of a replace or patch, whose next Scale
// build makes: its managedFields record it (Store.TrackScale).
func (h *resourceHandler) trackedScale(conds registry.WriteOptions, build func(current *autoscalingv1.Scale) (*autoscalingv1.Scale, error)) scaleWrite {
	return func(parent registry.Object, current *autoscalingv1.Scale) (*autoscalingv1.Scale, []metav1.ManagedFieldsEntry, error) {
		next, err := build(current)
		if err != nil {
			return nil, nil, err
		}
		managed, err := h.store.TrackScale(parent, current, next, conds)
		return next, managed, err
	}
}

// writeScale reads the object, has build make the new Scale from its
// current one, and replaces the object with the new spec replicas, guarded
// by the new Scale's resourceVersion (the client's precondition, 409 when
// stale) or, when it has none and the write is conditional otherwise
// (If-Match, or a patch, which is applied to what was read), by the
// revision read, reading again when another write lands first.
func (h *resourceHandler) writeScale(ctx context.Context, sc registry.ScaleSubresource, conds registry.WriteOptions, patch bool, build scaleWrite) (*autoscalingv1.Scale, error) {
	conds.Tracked, conds.Scale = true, true
	for attempt := 1; ; attempt++ {
		obj, err := h.store.Get(ctx, h.namespace, h.name)
		if err != nil {
			return nil, err
		}
		current, found, err := scaleOf(obj, sc)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		const unset = -2147483648 // kube's mark of spec replicas not there
		if !found {
			current.Spec.Replicas = unset
		}
		next, managed, err := build(obj, current)
		if err != nil {
			return nil, err
		}
		if next.Spec.Replicas == unset {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the spec replicas field %q cannot be empty", sc.SpecReplicasPath))
		}
		u, err := withReplicas(obj, sc, next.Spec.Replicas)
		if err != nil {
			return nil, err
		}
		u.SetManagedFields(managed)
		// The client's uid is a precondition too.
		if next.UID != "" {
			u.SetUID(next.UID)
		}
		// A patch is applied to what was read: the version it carries is
		// the read one unless the patch sets another.
		readVersion := current.ResourceVersion
		guardedByRead := (next.ResourceVersion == "" && (conds.IfMatch != nil || patch)) || (patch && next.ResourceVersion == readVersion)
		switch {
		case guardedByRead:
			u.SetResourceVersion(readVersion)
		case next.ResourceVersion != "":
			u.SetResourceVersion(next.ResourceVersion)
		default:
			u.SetResourceVersion("") // a replace without a version: 428
		}
		updated, _, err := h.store.Update(ctx, h.namespace, h.name, u, conds)
		if apierrors.IsConflict(err) && guardedByRead && attempt < maxScaleAttempts {
			continue // another write landed first: read it and build again
		}
		if err != nil {
			return nil, err
		}
		out, _, err := scaleOf(updated, sc)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return out, nil
	}
}

// scaleColumns are kube's Table columns of a custom resource's Scale.
var scaleColumns = sync.OnceValues(func() ([]metav1.TableColumnDefinition, func(*autoscalingv1.Scale) ([]any, error)) {
	columns := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Desired", Type: "integer", Description: "Number of desired replicas", JSONPath: ".spec.replicas"},
		{Name: "Available", Type: "integer", Description: "Number of actual replicas", JSONPath: ".status.replicas"},
		{Name: "Age", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"},
	}
	convertor, err := tableconvertor.New(columns)
	if err != nil {
		panic(fmt.Sprintf("apiserver: the Scale's table columns: %v", err)) // constant columns: a bug
	}
	headers, err := convertor.ConvertToTable(context.Background(), &unstructured.UnstructuredList{}, nil)
	if err != nil {
		panic(fmt.Sprintf("apiserver: the Scale's table columns: %v", err))
	}
	var mu sync.Mutex // the convertor's JSONPath parsers keep state
	cells := func(s *autoscalingv1.Scale) ([]any, error) {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		table, err := convertor.ConvertToTable(context.Background(), &unstructured.Unstructured{Object: content}, nil)
		if err != nil || len(table.Rows) != 1 {
			return nil, fmt.Errorf("apiserver: the Scale's table row: %v", err)
		}
		return table.Rows[0].Cells, nil
	}
	return headers.ColumnDefinitions, cells
})

// scaleTable is a Scale as kube prints it (kubectl get widgets/scale).
func scaleTable(s *autoscalingv1.Scale, includeObject string) (*metav1.Table, error) {
	columns, cellsOf := scaleColumns()
	cells, err := cellsOf(s)
	if err != nil {
		return nil, err
	}
	row := metav1.TableRow{Cells: cells}
	switch metav1.IncludeObjectPolicy(includeObject) {
	case metav1.IncludeNone:
	case metav1.IncludeObject:
		row.Object = runtime.RawExtension{Object: s}
	case "", metav1.IncludeMetadata:
		m := &metav1.PartialObjectMetadata{ObjectMeta: s.ObjectMeta}
		m.Kind, m.APIVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
		row.Object = runtime.RawExtension{Object: m}
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("includeObject must be None, Metadata or Object, not %q", includeObject))
	}
	table := &metav1.Table{ColumnDefinitions: columns, Rows: []metav1.TableRow{row}}
	table.ResourceVersion = s.ResourceVersion
	return table, nil
}
