package apiserver

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"

	"github.com/concord-dev/concord/apiserver/filters"
)

// checkSelectorSizes refuses, before they are parsed and before the query
// is unescaped, the selectors of a list's query longer than
// filters.MaxSelectorBytes (400 naming the limit). Only the first value of
// each is checked: it is the one parsed.
func checkSelectorSizes(rawQuery string) error {
	for _, name := range []string{"labelSelector", "fieldSelector"} {
		if n := filters.SelectorLength(rawQuery, name); n > filters.MaxSelectorBytes {
			return apierrors.NewBadRequest(fmt.Sprintf("the %s is %d bytes long; the limit is %d bytes", name, n, filters.MaxSelectorBytes))
		}
	}
	return nil
}

// checkSelectorRequirements refuses parsed selectors with more than
// filters.MaxSelectorRequirements requirements (400 naming the limit):
// each is a step of matching every object listed or watched.
func checkSelectorRequirements(opts *metainternalversion.ListOptions) error {
	counts := map[string]int{}
	if opts.LabelSelector != nil {
		reqs, _ := opts.LabelSelector.Requirements()
		counts["labelSelector"] = len(reqs)
	}
	if opts.FieldSelector != nil {
		counts["fieldSelector"] = len(opts.FieldSelector.Requirements())
	}
	for _, name := range []string{"labelSelector", "fieldSelector"} {
		if n := counts[name]; n > filters.MaxSelectorRequirements {
			return apierrors.NewBadRequest(fmt.Sprintf("the %s has %d requirements; the limit is %d", name, n, filters.MaxSelectorRequirements))
		}
	}
	return nil
}
