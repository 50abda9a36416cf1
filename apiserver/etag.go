package apiserver

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// entityTag is one RFC 9110 entity-tag: [W/]"opaque".
type entityTag struct {
	weak   bool
	opaque string
}

// tagList is a parsed If-Match or If-None-Match value: "*" or 1#entity-tag.
type tagList struct {
	any  bool
	tags []entityTag
}

// etag is the strong entity tag of a resourceVersion.
func etag(resourceVersion string) string { return `"` + resourceVersion + `"` }

// parseTagList parses a header value by RFC 9110's grammar:
//
//	If-Match = "*" / #entity-tag      entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE
//	etagc    = %x21 / %x23-7E / %x80-FF
//
// A comma may sit inside a quoted tag; empty list elements are ignored, as
// the list rule asks; anything else that is not a tag is an error.
func parseTagList(value string) (tagList, error) {
	if strings.Trim(value, " \t") == "*" {
		return tagList{any: true}, nil
	}
	var out tagList
	i := 0
	for {
		i = skipOWS(value, i)
		if i == len(value) {
			break
		}
		if value[i] == ',' {
			i++
			continue
		}
		var tag entityTag
		if strings.HasPrefix(value[i:], "W/") {
			tag.weak = true
			i += 2
		}
		if i == len(value) || value[i] != '"' {
			return tagList{}, fmt.Errorf("expected a quoted entity tag at offset %d", i)
		}
		end := i + 1
		for end < len(value) && value[end] != '"' {
			if c := value[end]; c < 0x21 || c == 0x7f {
				return tagList{}, fmt.Errorf("character %q at offset %d is not allowed in an entity tag", c, end)
			}
			end++
		}
		if end == len(value) {
			return tagList{}, fmt.Errorf("entity tag at offset %d has no closing quote", i)
		}
		tag.opaque = value[i+1 : end]
		out.tags = append(out.tags, tag)
		i = skipOWS(value, end+1)
		if i < len(value) && value[i] != ',' {
			return tagList{}, fmt.Errorf("expected a comma after the entity tag at offset %d", i)
		}
	}
	if len(out.tags) == 0 {
		return tagList{}, errors.New("expected \"*\" or at least one entity tag")
	}
	return out, nil
}

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// strongMatch is If-Match's comparison: a weak tag never matches.
func (l tagList) strongMatch(resourceVersion string) bool {
	if l.any {
		return true
	}
	for _, t := range l.tags {
		if !t.weak && t.opaque == resourceVersion {
			return true
		}
	}
	return false
}

// weakMatch is If-None-Match's comparison: only the opaque parts count.
func (l tagList) weakMatch(resourceVersion string) bool {
	if l.any {
		return true
	}
	for _, t := range l.tags {
		if t.opaque == resourceVersion {
			return true
		}
	}
	return false
}

// headerTags parses every line of header name; ok is false when absent.
func headerTags(r *http.Request, name string) (list tagList, ok bool, err error) {
	values := r.Header.Values(name)
	if len(values) == 0 {
		return tagList{}, false, nil
	}
	list, err = parseTagList(strings.Join(values, ", "))
	if err != nil {
		return tagList{}, true, fmt.Errorf("invalid %s header %q: %w", name, strings.Join(values, ", "), err)
	}
	return list, true, nil
}
