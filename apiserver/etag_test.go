package apiserver

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTagList(t *testing.T) {
	tests := []struct {
		value   string
		want    tagList
		wantErr string
	}{
		{`"1"`, tagList{tags: []entityTag{{opaque: "1"}}}, ""},
		{`W/"1"`, tagList{tags: []entityTag{{weak: true, opaque: "1"}}}, ""},
		{`*`, tagList{any: true}, ""},
		{` * `, tagList{any: true}, ""},
		{`"1", "2"`, tagList{tags: []entityTag{{opaque: "1"}, {opaque: "2"}}}, ""},
		{`"a,b", W/"c"`, tagList{tags: []entityTag{{opaque: "a,b"}, {weak: true, opaque: "c"}}}, ""},
		{`"1",,"2" ,`, tagList{tags: []entityTag{{opaque: "1"}, {opaque: "2"}}}, ""},
		{`""`, tagList{tags: []entityTag{{opaque: ""}}}, ""},
		{"\t\"x\"\t", tagList{tags: []entityTag{{opaque: "x"}}}, ""},
		{`4`, tagList{}, "expected a quoted entity tag at offset 0"},
		{`"4" "5"`, tagList{}, "expected a comma after the entity tag at offset 4"},
		{``, tagList{}, "expected \"*\" or at least one entity tag"},
		{`,`, tagList{}, "expected \"*\" or at least one entity tag"},
		{`"1`, tagList{}, "has no closing quote"},
		{`w/"1"`, tagList{}, "expected a quoted entity tag"},
		{`W/ "1"`, tagList{}, "expected a quoted entity tag"},
		{`*, "1"`, tagList{}, "expected a quoted entity tag"},
		{`"a b"`, tagList{}, "not allowed in an entity tag"},
		{"\"a\x00\"", tagList{}, "not allowed in an entity tag"},
	}
	for _, tc := range tests {
		got, err := parseTagList(tc.value)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseTagList(%q) error = %v; want one containing %q", tc.value, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseTagList(%q) error = %v", tc.value, err)
			continue
		}
		if diff := cmp.Diff(got, tc.want, cmp.AllowUnexported(tagList{}, entityTag{})); diff != "" {
			t.Errorf("parseTagList(%q) (-got +want):\n%s", tc.value, diff)
		}
	}
}

// TestComparisonTableFromRFC is RFC 9110 section 8.8.3.2's table.
func TestComparisonTableFromRFC(t *testing.T) {
	tests := []struct {
		a, b         string
		strong, weak bool
	}{
		{`W/"1"`, `W/"1"`, false, true},
		{`W/"1"`, `W/"2"`, false, false},
		{`W/"1"`, `"1"`, false, true},
		{`"1"`, `"1"`, true, true},
	}
	for _, tc := range tests {
		list, err := parseTagList(tc.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := parseTagList(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		// The stored side is always a strong tag (resourceVersion); a weak
		// stored tag never matches strongly.
		stored := b.tags[0]
		strong := !stored.weak && list.strongMatch(stored.opaque)
		weak := list.weakMatch(stored.opaque)
		if strong != tc.strong || weak != tc.weak {
			t.Errorf("%s vs %s: strong %v weak %v; want %v %v", tc.a, tc.b, strong, weak, tc.strong, tc.weak)
		}
	}
}

// FuzzParseTagList: the parser never panics, and what it accepts round-trips
// through its canonical form with the same meaning.
func FuzzParseTagList(f *testing.F) {
	for _, seed := range []string{`"1"`, `W/"1"`, `*`, `"a,b", W/"c"`, `"1",,"2"`, `4`, `"4" "5"`, ``, `"\x80"`, `W/`, `"`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		list, err := parseTagList(value)
		if err != nil {
			return
		}
		var parts []string
		for _, tag := range list.tags {
			if strings.ContainsAny(tag.opaque, "\" \t\x00") {
				t.Fatalf("parseTagList(%q) accepted opaque %q", value, tag.opaque)
			}
			s := `"` + tag.opaque + `"`
			if tag.weak {
				s = "W/" + s
			}
			parts = append(parts, s)
		}
		canonical := strings.Join(parts, ", ")
		if list.any {
			canonical = "*"
		}
		again, err := parseTagList(canonical)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", canonical, value, err)
		}
		if !cmp.Equal(again, list, cmp.AllowUnexported(tagList{}, entityTag{})) {
			t.Fatalf("%q -> %+v, but its canonical form %q -> %+v", value, list, canonical, again)
		}
	})
}
