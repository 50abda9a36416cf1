package apiserver

import (
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/concord-dev/concord/registry"
)

// tableMediaType is what a Table answer is sent as, as kube-apiserver does.
const tableMediaType = "application/json;as=Table;v=v1;g=meta.k8s.io"

// wantsTable reports whether the client's most preferred acceptable media
// range is a meta.k8s.io/v1 Table in JSON (kubectl get asks for that, then
// v1beta1, then plain JSON).
func wantsTable(r *http.Request) bool {
	return responseTransform(r).kind == "Table"
}

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name",
		Description: "Name must be unique within a namespace."}
	ageColumn = metav1.TableColumnDefinition{Name: "Age", Type: "string",
		Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}
)

// writeResource answers a GET of one object or a list: as a Table of the
// resource's columns or as its metadata alone when the client asks for
// that, else as it is.
func writeResource(w http.ResponseWriter, r *http.Request, res *registry.Resource, obj runtime.Object) {
	target := responseTransform(r)
	if target.partial() {
		writePartial(w, r, target, http.StatusOK, obj)
		return
	}
	if target.kind != "Table" {
		writeObjectOf(w, r, res, http.StatusOK, obj)
		return
	}
	table, err := toTable(res, obj, r.URL.Query().Get("includeObject"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	info, _ := serializerFor(runtime.ContentTypeJSON)
	info.MediaType = tableMediaType
	encode(w, r, info, http.StatusOK, table)
}

func toTable(res *registry.Resource, obj runtime.Object, includeObject string) (*metav1.Table, error) {
	switch metav1.IncludeObjectPolicy(includeObject) {
	case "", metav1.IncludeMetadata, metav1.IncludeObject, metav1.IncludeNone:
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("includeObject must be None, Metadata or Object, not %q", includeObject))
	}
	table := &metav1.Table{ColumnDefinitions: res.TableColumns}
	if !res.TableColumnsOnly {
		table.ColumnDefinitions = append(append([]metav1.TableColumnDefinition{nameColumn}, res.TableColumns...), ageColumn)
	}
	var items []runtime.Object
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
		listMeta, err := meta.ListAccessor(obj)
		if err != nil {
			return nil, fmt.Errorf("table: %w", err)
		}
		table.ResourceVersion = listMeta.GetResourceVersion()
		table.Continue = listMeta.GetContinue()
		table.RemainingItemCount = listMeta.GetRemainingItemCount()
	} else {
		items = []runtime.Object{obj}
	}
	table.Rows = make([]metav1.TableRow, 0, len(items))
	for _, item := range items {
		o, ok := item.(registry.Object)
		if !ok {
			return nil, fmt.Errorf("table: %T is not an object", item)
		}
		var cells []any
		if res.TableCells != nil {
			cells = res.TableCells(o)
		}
		if !res.TableColumnsOnly {
			cells = append(append([]any{o.GetName()}, cells...), age(o.GetCreationTimestamp()))
		}
		row := metav1.TableRow{Cells: cells}
		switch metav1.IncludeObjectPolicy(includeObject) {
		case metav1.IncludeNone:
		case metav1.IncludeObject:
			row.Object = runtime.RawExtension{Object: o}
		default:
			objectMeta, err := objectMetaOf(o)
			if err != nil {
				return nil, err
			}
			m := &metav1.PartialObjectMetadata{ObjectMeta: *objectMeta}
			m.Kind, m.APIVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
			row.Object = runtime.RawExtension{Object: m}
		}
		table.Rows = append(table.Rows, row)
	}
	return table, nil
}

// objectMetaOf is o's ObjectMeta: its own for a typed object, its metadata
// read into one for an unstructured (custom) object.
func objectMetaOf(o registry.Object) (*metav1.ObjectMeta, error) {
	if a, ok := o.(metav1.ObjectMetaAccessor); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m, nil
		}
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("table: %T has no ObjectMeta", o)
	}
	m := &metav1.ObjectMeta{}
	if raw, ok := u.Object["metadata"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, m); err != nil {
			return nil, fmt.Errorf("table: the metadata of %s: %w", u.GetName(), err)
		}
	}
	return m, nil
}

// age prints like kubectl: 5s, 3m, 2d.
func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}
