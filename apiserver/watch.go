package apiserver

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
)

// isWatch tells long-running watch requests from the rest: they get no
// request timeout, only their own timeoutSeconds, and are not counted in
// the in-flight limits. It must agree with the handlers: a GET of a
// /watch/ path (/api/v1/watch/..., /apis/<group>/<version>/watch/...),
// or with the watch parameter as the ListOptions decoder reads it
// (anything but "0" and "false" is true; kube-apiserver's RequestInfo
// reads it the same way). A namespace or object named "watch" does not
// make a request a watch.
func isWatch(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
	switch {
	case len(parts) > 3 && parts[0] == "api" && parts[2] == "watch":
		return true
	case len(parts) > 4 && parts[0] == "apis" && parts[3] == "watch":
		return true
	}
	values, ok := r.URL.Query()["watch"]
	return ok && len(values) > 0 && values[0] != "0" && !strings.EqualFold(values[0], "false")
}

// serveWatch streams the changes of namespace (all when empty), or of the
// object name when it is set, as kube-apiserver does: one JSON object per
// line, or length-prefixed protobuf frames, flushed as they happen.
func (h *resourceHandler) serveWatch(w http.ResponseWriter, r *http.Request, namespace, name string, opts *metainternalversion.ListOptions) {
	opts.Watch = true
	if name != "" {
		byName := fields.OneTermEqualSelector("metadata.name", name)
		if opts.FieldSelector == nil || opts.FieldSelector.Empty() {
			opts.FieldSelector = byName
		} else {
			opts.FieldSelector = fields.AndSelectors(opts.FieldSelector, byName)
		}
	}
	info, err := responseSerializer(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if info.StreamSerializer == nil {
		writeError(w, r, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", h.store.Resource.GroupResource(), "",
			fmt.Sprintf("watch is not available as %s; use %s or %s", info.MediaType, runtime.ContentTypeJSON, runtime.ContentTypeProtobuf), 0, false))
		return
	}
	timeout := registry.DefaultWatchTimeout(rand.Float64())
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	stream, err := h.store.Watch(r.Context(), namespace, opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer h.metrics.watchStarted(infoOf(r))()

	mediaType := info.MediaType
	if mediaType != runtime.ContentTypeJSON {
		mediaType += ";stream=watch"
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(http.StatusOK)
	flusher := http.NewResponseController(w)
	if err := flusher.Flush(); err != nil {
		logger(r).Warn("watch: flush", "err", err)
		return
	}

	encoder := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(w), info.StreamSerializer.Serializer)
	var buf bytes.Buffer
	// kubectl get -w asks for Tables: each change is then a one-row Table,
	// with the column definitions in the first one only, as kube-apiserver.
	asTable, includeObject, headers := wantsTable(r), r.URL.Query().Get("includeObject"), true
	send := func(ev watch.Event) error {
		buf.Reset()
		obj := ev.Object
		if st, ok := obj.(*metav1.Status); ok {
			st.Kind, st.APIVersion = "Status", "v1"
		}
		if asTable && (ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted) {
			table, err := toTable(h.store.Resource, obj, includeObject)
			if err != nil {
				return err
			}
			table.Kind, table.APIVersion = "Table", metav1.SchemeGroupVersion.String()
			if !headers {
				table.ColumnDefinitions = nil
			}
			headers = false
			obj = table
		}
		if err := info.Serializer.Encode(obj, &buf); err != nil {
			return fmt.Errorf("encode watch event: %w", err)
		}
		out := metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: buf.Bytes()}}
		if err := encoder.Encode(&out); err != nil {
			return err
		}
		h.metrics.watchEvent(h.store.Resource)
		return flusher.Flush()
	}
	ctx, cancel := contextWithTimeout(r, timeout)
	defer cancel()
	if err := stream.Run(ctx, send); err != nil {
		logger(r).Debug("watch ended", "err", err)
	}
}
