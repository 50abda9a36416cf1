package apiserver

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// writePartial answers obj, an object or a list, as its metadata alone
// (target.kind), in target's media type: what client-go's metadata client and
// controller-runtime's metadata-only caches ask for, so that they never
// receive a Secret's data.
func writePartial(w http.ResponseWriter, r *http.Request, target transformTarget, code int, obj runtime.Object) {
	out, err := asPartial(target.kind, obj)
	if err != nil {
		writeError(w, r, err)
		return
	}
	info, _ := serializerFor(target.mediaType)
	info.MediaType = target.contentType()
	encode(w, r, info, code, out)
}

// asPartial is kube-apiserver's asPartialObjectMetadata and
// asPartialObjectMetadataList: an object's metadata as a
// PartialObjectMetadata, a list's items' as a PartialObjectMetadataList
// (each item with its kind and apiVersion, the list's metadata kept). The
// wrong one of the two for obj is 406, as in kube.
func asPartial(kind string, obj runtime.Object) (runtime.Object, error) {
	if kind == partialObjectMetadata {
		if meta.IsListType(obj) {
			return nil, statusError(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
				fmt.Sprintf("you requested PartialObjectMetadata, but the requested object is a list (%T)", obj))
		}
		return partialObject(obj)
	}
	listMeta, ok := obj.(metav1.ListInterface)
	if !ok {
		return nil, statusError(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
			fmt.Sprintf("you requested PartialObjectMetadataList, but the requested object is not a list (%T)", obj))
	}
	// Items stays nil for an empty list: kube answers "items":null.
	list := &metav1.PartialObjectMetadataList{}
	err := meta.EachListItem(obj, func(item runtime.Object) error {
		partial, err := partialObject(item)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, *partial)
		return nil
	})
	if err != nil {
		return nil, err
	}
	list.ResourceVersion = listMeta.GetResourceVersion()
	list.Continue = listMeta.GetContinue()
	list.RemainingItemCount = listMeta.GetRemainingItemCount()
	return list, nil
}

// partialObject is obj's metadata as a meta.k8s.io/v1 PartialObjectMetadata.
func partialObject(obj runtime.Object) (*metav1.PartialObjectMetadata, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("metadata of %T: %w", obj, err)
	}
	partial := meta.AsPartialObjectMetadata(m)
	partial.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind(partialObjectMetadata))
	return partial, nil
}
