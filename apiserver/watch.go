package apiserver

import (
	"bytes"
	"fmt"
	"io"
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
	// kubectl get -w asks for Tables: each change is then a one-row Table,
	// with the column definitions in the first one only, as kube-apiserver.
	asTable, includeObject, headers := wantsTable(r), r.URL.Query().Get("includeObject"), true
	encodeObject := func(obj runtime.Object) func() ([]byte, error) {
		return func() ([]byte, error) {
			var buf bytes.Buffer
			if err := info.Serializer.Encode(obj, &buf); err != nil {
				return nil, fmt.Errorf("encode watch event: %w", err)
			}
			return bytes.TrimRight(buf.Bytes(), "\n"), nil
		}
	}
	send := func(ev watch.Event, encodings *registry.Encodings) error {
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
			obj, encodings = table, nil
		}
		// A fan-out event is encoded once per format and shared by every
		// watcher of this replica.
		raw, err := encodings.Get(info.MediaType, encodeObject(obj))
		if err != nil {
			return err
		}
		if info.MediaType == runtime.ContentTypeJSON {
			// The frame is written as it is: the object's JSON is already
			// valid, and json.Encoder would validate and compact it again
			// for every watcher.
			err = writeJSONEvent(w, ev.Type, raw)
		} else {
			err = encoder.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}})
		}
		if err != nil {
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

// writeJSONEvent writes {"type":T,"object":RAW} and a newline: one event of
// a JSON watch stream, as kube-apiserver frames them.
func writeJSONEvent(w io.Writer, typ watch.EventType, raw []byte) error {
	frame := make([]byte, 0, len(raw)+32)
	frame = append(frame, `{"type":"`...)
	frame = append(frame, typ...)
	frame = append(frame, `","object":`...)
	frame = append(frame, raw...)
	frame = append(frame, "}\n"...)
	_, err := w.Write(frame)
	return err
}
