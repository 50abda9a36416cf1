package apiserver

import (
	"bufio"
	"encoding/json"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/concord-dev/concord/registry"
)

// fastFormat is the media type a get or list may be written in without
// encoding its objects: JSON (the stored bytes) or Kubernetes protobuf
// (the cache's encodings), when that is the client's preferred format and
// it asks for no Table nor metadata alone; JSON not pretty-printed. ""
// otherwise.
func fastFormat(r *http.Request) string {
	if responseTransform(r).kind != "" {
		return ""
	}
	info, err := responseSerializer(r)
	switch {
	case err != nil:
		return ""
	case info.MediaType == runtime.ContentTypeJSON && !wantsPretty(r), info.MediaType == runtime.ContentTypeProtobuf:
		return info.MediaType
	}
	return ""
}

// writeJSONList writes a list whose items are JSON already, in the same
// form the serializer gives a typed list.
func writeJSONList(w http.ResponseWriter, r *http.Request, list *registry.JSONList) {
	meta := struct {
		ResourceVersion    string `json:"resourceVersion,omitempty"`
		Continue           string `json:"continue,omitempty"`
		RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
	}{list.ResourceVersion, list.Continue, list.RemainingItemCount}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", runtime.ContentTypeJSON)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(`{"kind":"` + list.Kind + `","apiVersion":"` + list.APIVersion + `","metadata":`)
	bw.Write(metaJSON)
	bw.WriteString(`,"items":[`)
	for i, item := range list.Items {
		if i > 0 {
			bw.WriteByte(',')
		}
		item.WriteJSON(bw)
	}
	bw.WriteString("]}\n")
	if err := bw.Flush(); err != nil {
		logger(r).Warn("write response", "err", err)
	}
}

// writeJSON answers code with one object that is JSON already.
func writeJSON(w http.ResponseWriter, r *http.Request, code int, obj []byte) {
	w.Header().Set("Content-Type", runtime.ContentTypeJSON)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if _, err := w.Write(append(obj, '\n')); err != nil {
		logger(r).Warn("write response", "err", err)
	}
}

// writeProtobuf writes a list or an object whose items are protobuf
// already, the same bytes the protobuf serializer gives the typed object,
// through a buffer of at most bufSize bytes.
func writeProtobuf(w http.ResponseWriter, r *http.Request, bufSize int, obj interface{ WriteProtobuf(*bufio.Writer) error }) {
	w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
	w.Header().Set("Cache-Control", "no-cache, private")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, min(bufSize, 64<<10))
	err := obj.WriteProtobuf(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		logger(r).Warn("write response", "err", err)
	}
}
