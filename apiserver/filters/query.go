package filters

import (
	"iter"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/fields"
)

// Limits on the selectors of a list, watch or deletecollection, which
// kube-apiserver does not have (only its 1 MiB of headers bounds them):
// parsing a selector costs some 60 bytes of allocations and 0.4 µs per
// byte, and matching an object against it a step per requirement. A
// selector beyond them is refused with 400 before it is parsed.
const (
	// MaxSelectorBytes bounds a labelSelector or fieldSelector, once
	// unescaped.
	MaxSelectorBytes = 10 << 10
	// MaxSelectorRequirements bounds the requirements (comma-separated
	// terms: app=web, tier in (a,b), !legacy) of each selector.
	MaxSelectorRequirements = 100
)

// maxQueryParams is url.ParseQuery's default limit: a query with more
// pairs has none.
const maxQueryParams = 10000

// queryValue is url.Values.Get of rawQuery, and whether key is there,
// without url.ParseQuery's unescaping and copying of every pair: the query
// can be as large as the headers (1 MiB), and the filters read it before
// the in-flight limits.
func queryValue(rawQuery, key string) (string, bool) {
	for k, v := range queryPairs(rawQuery) {
		if k != key {
			continue
		}
		if v, err := url.QueryUnescape(v); err == nil {
			return v, true
		}
	}
	return "", false
}

// SelectorLength is the length, once unescaped, of the first key (a
// selector: labelSelector, fieldSelector) in rawQuery, 0 if there is none,
// counted without unescaping: url.ParseQuery's unescaping of a 1 MiB query
// costs more than everything else the server does to refuse it.
func SelectorLength(rawQuery, key string) int {
	for k, v := range queryPairs(rawQuery) {
		if k == key {
			return len(v) - 2*strings.Count(v, "%")
		}
	}
	return 0
}

// queryPairs are the pairs of rawQuery, their keys unescaped, their values
// not. It skips what url.ParseQuery skips: pairs with a semicolon, keys
// that do not unescape, and every pair of a query with more than
// maxQueryParams.
func queryPairs(rawQuery string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		if strings.Count(rawQuery, "&")+1 > maxQueryParams {
			return
		}
		for rawQuery != "" {
			var pair string
			pair, rawQuery, _ = strings.Cut(rawQuery, "&")
			if pair == "" || strings.Contains(pair, ";") {
				continue
			}
			k, v, _ := strings.Cut(pair, "=")
			if strings.ContainsAny(k, "%+") {
				var err error
				if k, err = url.QueryUnescape(k); err != nil {
					continue
				}
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// watchRequested reads ?watch= as the ListOptions decoder does: present
// and neither "0" nor "false" (in any case) is a watch.
func watchRequested(rawQuery string) bool {
	v, ok := queryValue(rawQuery, "watch")
	return ok && v != "0" && !strings.EqualFold(v, "false")
}

// selectedName is the object a list or watch names with
// fieldSelector=metadata.name=<name>, as kube-apiserver's RequestInfo
// reads it, for authorization. Only a selector within MaxSelectorBytes
// (measured before it is unescaped) that names metadata.name is parsed:
// the handler refuses a longer one. Unlike kube-apiserver, a list whose
// other options do not decode (a bad labelSelector, limit=x) still names
// the object: the handler then refuses it with 400.
func selectedName(rawQuery string) (string, bool) {
	if SelectorLength(rawQuery, "fieldSelector") > MaxSelectorBytes {
		return "", false
	}
	sel, ok := queryValue(rawQuery, "fieldSelector")
	if !ok || !strings.Contains(sel, "metadata.name") {
		return "", false
	}
	parsed, err := fields.ParseSelector(sel)
	if err != nil {
		return "", false
	}
	name, ok := parsed.RequiresExactMatch("metadata.name")
	return name, ok && len(path.IsValidPathSegmentName(name)) == 0
}
