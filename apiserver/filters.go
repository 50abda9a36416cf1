package apiserver

import (
	"log/slog"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/concord-dev/concord/apiserver/filters"
	"github.com/concord-dev/concord/registry"
)

// filteredRequests keeps in each request's requestInfo what the
// authentication filter learns of it (filters.Requests).
type filteredRequests struct {
	// catalog has the served resources, to label the metrics of refused
	// requests.
	catalog *registry.Catalog
}

func (filteredRequests) Parsed(r *http.Request, a *filters.Attributes) { infoOf(r).attrs = a }

func (filteredRequests) Logger(r *http.Request) *slog.Logger { return logger(r) }

// Refused gives a refused request to a served resource the metric labels
// its handler would have: a refused request never reaches it. Other paths
// keep no resource label, so that no client can make up series.
func (f filteredRequests) Refused(r *http.Request, a filters.Attributes) {
	if !a.ResourceRequest || a.Subresource != "" {
		return
	}
	res, ok := f.served(schema.GroupVersionResource{Group: a.APIGroup, Version: a.APIVersion, Resource: a.Resource})
	if !ok {
		return
	}
	verb := strings.ToUpper(a.Verb)
	switch a.Verb {
	case "create":
		verb = http.MethodPost
	case "update":
		verb = http.MethodPut
	}
	describeResource(r, res, verb, a.Namespace, a.Name)
}

// served finds a resource the catalog serves now, or a review.
func (f filteredRequests) served(gvr schema.GroupVersionResource) (*registry.Resource, bool) {
	if s, ok := f.catalog.Lookup(gvr.Group, gvr.Version, gvr.Resource); ok {
		return s.Resource, true
	}
	for _, res := range reviewResources {
		if res.GroupVersion.WithResource(res.Plural) == gvr {
			return res, true
		}
	}
	return nil, false
}
