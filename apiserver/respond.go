package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/concord-dev/concord/registry"
)

// writeObject encodes obj in the format the client accepts.
func writeObject(w http.ResponseWriter, r *http.Request, code int, obj runtime.Object) {
	info, err := responseSerializer(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	encode(w, r, info, code, obj)
}

// writeObjectOf encodes obj, an answer about res, in the format the
// client accepts of those res is served in: JSON and YAML only for a
// custom resource (customResponseSerializer).
func writeObjectOf(w http.ResponseWriter, r *http.Request, res *registry.Resource, code int, obj runtime.Object) {
	if !isCustom(res) {
		writeObject(w, r, code, obj)
		return
	}
	info, err := customResponseSerializer(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	encode(w, r, info, code, obj)
}

func encode(w http.ResponseWriter, r *http.Request, info runtime.SerializerInfo, code int, obj runtime.Object) {
	kinds, _, err := registry.Scheme.ObjectKinds(obj)
	if err != nil {
		logger(r).Error("encode response: unknown type", "type", obj, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(kinds[0])
	serializer := info.Serializer
	if info.PrettySerializer != nil && wantsPretty(r) {
		serializer = info.PrettySerializer
	} else if _, custom := obj.(*unstructured.Unstructured); custom && info.MediaType == runtime.ContentTypeJSON {
		// The same bytes without encoding/json's second pass over the
		// output of Unstructured.MarshalJSON.
		serializer = unstructured.UnstructuredJSONScheme
	}
	w.Header().Set("Content-Type", info.MediaType)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if err := serializer.Encode(obj, w); err != nil {
		logger(r).Warn("write response", "err", err)
	}
}

// wantsPretty follows kube-apiserver: ?pretty=true, or a curl/wget user.
func wantsPretty(r *http.Request) bool {
	if p := r.URL.Query().Get("pretty"); p != "" {
		return p == "true" || p == "1"
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl") || strings.HasPrefix(ua, "Wget")
}

// writeError answers err as a Status. Status errors go out as they are;
// anything else is logged in full and answered 500 without its text.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var status apierrors.APIStatus
	isStatus := errors.As(err, &status)
	if errors.Is(r.Context().Err(), context.Canceled) && (!isStatus || status.Status().Code >= 500) {
		// The client hung up (net/http cancels the context when the
		// connection fails), and what failed is what waited for it: no
		// server error happened. The request's log line says 499 and how
		// long it ran. A 4xx (a body cut at its deadline: 408) still goes
		// out, to a client that may be there.
		if isStatus {
			infoOf(r).reason = status.Status().Reason
		}
		w.WriteHeader(statusClientClosedRequest)
		return
	}
	if !isStatus {
		logger(r).Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		status = apierrors.NewInternalError(errors.New("an error on the server prevented the request from succeeding; the server log has the details"))
	}
	st := status.Status()
	st.Status = metav1.StatusFailure
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		// As kube-apiserver: clients (client-go) wait this long and retry.
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	infoOf(r).reason = st.Reason
	info, negotiateErr := responseSerializer(r)
	if negotiateErr != nil {
		info, _ = serializerFor(runtime.ContentTypeJSON)
	}
	encode(w, r, info, int(st.Code), &st)
}

// statusClientClosedRequest is the code logged and counted for a request
// whose client hung up before the answer (nginx's 499): not a 5xx, since the
// server did not fail.
const statusClientClosedRequest = 499

// logger is the request's logger: its lines carry the request's auditID.
// It is made when first needed; most requests log only their final line.
func logger(r *http.Request) *slog.Logger {
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		return info.logger()
	}
	return slog.Default()
}
