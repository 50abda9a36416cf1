package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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
	target := responseTransform(r)
	info, err := h.watchSerializer(r, target)
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
	// A watch that takes its connection over has a context of its own: it
	// follows the request's until then (net/http then ends the request's).
	// One that stays in net/http (HTTP/2) ends with net/http's context of
	// the request. Neither has the request's values: nothing below reads
	// them, and the watch would keep them alive.
	detach := detachable(w, r)
	ctx, cancel := infoOf(r).base, context.CancelFunc(func() {})
	if ctx == nil {
		ctx = r.Context() // outside withRequestContext
	}
	unfollow := func() bool { return false }
	if detach {
		ctx, cancel = context.WithCancel(context.Background())
		unfollow = context.AfterFunc(r.Context(), cancel)
	}
	handedOff := false
	defer func() {
		if !handedOff {
			unfollow()
			cancel()
		}
	}()
	stream, err := h.store.Watch(ctx, namespace, opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer func() {
		if !handedOff {
			stream.Stop()
		}
	}()

	if detach {
		// The connection ends with the watch: net/http no longer has it.
		w.Header().Set("Connection", "close")
	}
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

	ws := &watchStream{
		h: h, stream: stream, info: info, req: infoOf(r), timeout: timeout,
		asTable: target.kind == "Table", asPartial: target.partial(), includeObject: r.URL.Query().Get("includeObject"), headers: true,
	}
	if detach {
		conn, _, err := flusher.Hijack()
		if err == nil {
			unfollow()
			handedOff = true
			ws.req.base = nil // over with the handler: the watch has ctx
			ws.req.rest = func() { ws.runDetached(ctx, cancel, conn) }
			return
		}
		ws.req.logger().Debug("watch: keeps its connection in net/http", "err", err)
		ws.release = func() {
			unfollow()
			cancel()
		}
	}
	ws.setOutput(w, flusher.Flush)
	handedOff = true
	ws.park(ctx)
}

// watchStream is one watch being sent: what it needs once its handler may
// have returned (no request, no ResponseWriter).
type watchStream struct {
	h       *resourceHandler
	stream  *registry.Watch
	info    runtime.SerializerInfo
	req     *requestInfo
	timeout time.Duration
	// kubectl get -w asks for Tables: each change is then a one-row Table,
	// with the column definitions in the first one only (headers), as
	// kube-apiserver.
	asTable       bool
	includeObject string
	headers       bool
	// asPartial: each object is sent as its metadata alone, a
	// PartialObjectMetadata (client-go's metadata informers).
	asPartial bool

	out     io.Writer
	flush   func() error
	encoder streaming.Encoder // protobuf only: JSON frames are written as they are

	// A parked watch's context, and what its end stops and releases.
	ctx      context.Context
	endTimer *time.Timer
	unfollow func() bool
	ended    func()
	release  func() // nil when there is nothing more
}

func (ws *watchStream) setOutput(out io.Writer, flush func() error) {
	ws.out, ws.flush = out, flush
	if ws.info.MediaType != runtime.ContentTypeJSON {
		ws.encoder = streaming.NewEncoder(ws.info.StreamSerializer.Framer.NewFrameWriter(out), ws.info.StreamSerializer.Serializer)
	}
}

// run sends the watch's events until it ends (see registry.Watch.Run) or
// its timeout, which calls cancel, ctx's: a child context with the timeout
// would cost a timer context and a map of children in ctx, per watcher.
func (ws *watchStream) run(ctx context.Context, cancel context.CancelFunc) {
	defer ws.h.metrics.watchStarted(ws.req)()
	timeout := time.AfterFunc(ws.timeout, cancel)
	defer timeout.Stop()
	if err := ws.stream.Run(ctx, ws.send); err != nil {
		ws.req.logger().Debug("watch ended", "err", err)
	}
}

// park leaves the rest of the watch to withRequestContext (parkedRest),
// which runs it on the handler's goroutine: ctx's end, the timeout and the
// server stopping watches wake it from its wait on the stream.
func (ws *watchStream) park(ctx context.Context) {
	ws.ctx = ctx
	ws.ended = ws.h.metrics.watchStarted(ws.req)
	ws.endTimer = time.AfterFunc(ws.timeout, ws.stream.Stop)
	ws.unfollow = context.AfterFunc(ctx, ws.stream.Stop)
	ws.req.parked = ws
}

func (ws *watchStream) ready() <-chan struct{} { return ws.stream.Ready() }

func (ws *watchStream) step() (more bool) {
	defer func() {
		if !more {
			ws.endTimer.Stop()
			ws.unfollow()
			ws.ended()
			if ws.release != nil {
				ws.release()
			}
		}
	}()
	more, err := ws.stream.Step(ws.ctx, ws.send)
	if err != nil {
		ws.req.logger().Debug("watch ended", "err", err)
	}
	return more
}

func (ws *watchStream) send(ev watch.Event, encodings *registry.Encodings) error {
	obj := ev.Object
	if st, ok := obj.(*metav1.Status); ok {
		st.Kind, st.APIVersion = "Status", "v1"
	}
	if ws.asTable && (ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted) {
		table, err := toTable(ws.h.store.Resource, obj, ws.includeObject)
		if err != nil {
			return err
		}
		table.Kind, table.APIVersion = "Table", metav1.SchemeGroupVersion.String()
		if !ws.headers {
			table.ColumnDefinitions = nil
		}
		ws.headers = false
		obj, encodings = table, nil
	}
	// A fan-out event is encoded once per format and shared by every
	// watcher of this replica.
	format, encodeObject := ws.info.MediaType, ws.encodeObject(obj)
	if ws.asPartial && ev.Type != watch.Error {
		format, encodeObject = format+";as="+partialObjectMetadata, ws.encodePartial(obj)
	}
	raw, err := encodings.Get(format, encodeObject)
	if err != nil {
		return err
	}
	if ws.info.MediaType == runtime.ContentTypeJSON {
		// The frame is written as it is: the object's JSON is already
		// valid, and json.Encoder would validate and compact it again
		// for every watcher.
		err = writeJSONEvent(ws.out, ev.Type, raw)
	} else {
		err = ws.encoder.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}})
	}
	if err != nil {
		return err
	}
	ws.h.metrics.watchEvent(ws.h.store.Resource)
	return ws.flush()
}

func (ws *watchStream) encodeObject(obj runtime.Object) func() ([]byte, error) {
	return func() ([]byte, error) {
		var buf bytes.Buffer
		if err := ws.info.Serializer.Encode(obj, &buf); err != nil {
			return nil, fmt.Errorf("encode watch event: %w", err)
		}
		return bytes.TrimRight(buf.Bytes(), "\n"), nil
	}
}

// encodePartial encodes obj's metadata alone, converted only when the
// event's encoding is not shared yet.
func (ws *watchStream) encodePartial(obj runtime.Object) func() ([]byte, error) {
	return func() ([]byte, error) {
		partial, err := partialObject(obj)
		if err != nil {
			return nil, err
		}
		return ws.encodeObject(partial)()
	}
}

// watchSerializer is the format of a watch's events: the client's, of those
// the resource is served in, or of those its metadata alone is (any, for
// custom resources too). Watch events are objects, not lists: a client that
// asks for PartialObjectMetadataList is answered 406 before the watch starts.
func (h *resourceHandler) watchSerializer(r *http.Request, target transformTarget) (runtime.SerializerInfo, error) {
	switch {
	case target.kind == partialObjectMetadataList:
		return runtime.SerializerInfo{}, statusError(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
			"you requested PartialObjectMetadataList, but a watch sends objects: ask for PartialObjectMetadata")
	case target.kind == partialObjectMetadata:
		info, _ := serializerFor(target.mediaType)
		return info, nil
	case isCustom(h.store.Resource):
		return customResponseSerializer(r)
	}
	return responseSerializer(r)
}

// writeJSONEvent writes {"type":T,"object":RAW} and a newline: one event of
// a JSON watch stream, as kube-apiserver frames them. In pieces, not one
// frame: the writer buffers them (net/http's HTTP/2 stream, or chunkedBody)
// and a frame per event and watcher was most of a watch's garbage.
func writeJSONEvent(w io.Writer, typ watch.EventType, raw []byte) error {
	head, ok := jsonEventHeads[typ]
	if !ok {
		head = []byte(`{"type":"` + string(typ) + `","object":`)
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	if _, err := w.Write(raw); err != nil {
		return err
	}
	_, err := w.Write(jsonEventEnd)
	return err
}

var (
	jsonEventHeads = map[watch.EventType][]byte{}
	jsonEventEnd   = []byte("}\n")
)

func init() {
	for _, typ := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
		jsonEventHeads[typ] = []byte(`{"type":"` + string(typ) + `","object":`)
	}
}

// legacyWatch serves /watch/ paths and ?watch on an object's path.
func (h *resourceHandler) legacyWatch(w http.ResponseWriter, r *http.Request) {
	namespace, name := h.namespace, h.name
	describeResource(r, h.store.Resource, "WATCH", namespace, name)
	if r.Method != http.MethodGet {
		infoOf(r).verb = r.Method
		h.methodNotAllowed(w, r, verb(r.Method))
		return
	}
	if err := checkPathSegments(namespace, name); err != nil {
		writeError(w, r, err)
		return
	}
	opts, err := listOptions(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	h.serveWatch(w, r, namespace, name, opts)
}
