package openapi

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kube-openapi/pkg/common"

	"github.com/concord-dev/concord/registry"
)

// The route metadata keys kube-apiserver's installer sets on every route;
// kube-openapi copies x-kubernetes-* metadata onto the operation.
const (
	routeMetaGVK    = "x-kubernetes-group-version-kind"
	routeMetaAction = "x-kubernetes-action"
)

// routeContainer is one group version: the routes under /api/v1 or
// /apis/<group>/<version>, as kube-apiserver's go-restful WebService is.
type routeContainer struct {
	rootPath string
	routes   []common.Route
}

func (c *routeContainer) RootPath() string                   { return c.rootPath }
func (c *routeContainer) PathParameters() []common.Parameter { return nil }
func (c *routeContainer) Routes() []common.Route             { return c.routes }

// route implements kube-openapi's common.Route.
type route struct {
	method      string
	path        string
	operation   string
	description string
	params      []common.Parameter
	consumes    []string
	produces    []string
	metadata    map[string]interface{}
	reads       interface{}
	writes      interface{}
	responses   []common.StatusCodeResponse
}

func (r *route) Method() string                                   { return r.method }
func (r *route) Path() string                                     { return r.path }
func (r *route) OperationName() string                            { return r.operation }
func (r *route) Parameters() []common.Parameter                   { return r.params }
func (r *route) Description() string                              { return r.description }
func (r *route) Consumes() []string                               { return r.consumes }
func (r *route) Produces() []string                               { return r.produces }
func (r *route) Metadata() map[string]interface{}                 { return r.metadata }
func (r *route) RequestPayloadSample() interface{}                { return r.reads }
func (r *route) ResponsePayloadSample() interface{}               { return r.writes }
func (r *route) StatusCodeResponses() []common.StatusCodeResponse { return r.responses }

// parameter implements kube-openapi's common.Parameter.
type parameter struct {
	ParamName        string               `json:"name"`
	ParamDescription string               `json:"description,omitempty"`
	ParamRequired    bool                 `json:"required,omitempty"`
	ParamKind        common.ParameterKind `json:"kind"`
	ParamDataType    string               `json:"dataType,omitempty"`
}

func (p *parameter) Name() string               { return p.ParamName }
func (p *parameter) Description() string        { return p.ParamDescription }
func (p *parameter) Required() bool             { return p.ParamRequired }
func (p *parameter) Kind() common.ParameterKind { return p.ParamKind }
func (p *parameter) DataType() string           { return p.ParamDataType }
func (p *parameter) AllowMultiple() bool        { return false }

// response implements kube-openapi's common.StatusCodeResponse.
type response struct {
	code    int
	message string
	model   interface{}
}

func (r response) Code() int          { return r.code }
func (r response) Message() string    { return r.message }
func (r response) Model() interface{} { return r.model }

func pathParam(name, description string) common.Parameter {
	return &parameter{ParamName: name, ParamDescription: description, ParamRequired: true, ParamKind: common.PathParameterKind, ParamDataType: "string"}
}

func queryParam(name, description, dataType string) common.Parameter {
	return &parameter{ParamName: name, ParamDescription: description, ParamKind: common.QueryParameterKind, ParamDataType: dataType}
}

func bodyParam(required bool) common.Parameter {
	return &parameter{ParamName: "body", ParamRequired: required, ParamKind: common.BodyParameterKind}
}

var prettyParam = queryParam("pretty", "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).", "string")

// optionParams turns the options type into query parameters the way
// kube-apiserver's installer (AddObjectParams) does: every top-level field
// with a JSON name that is not a struct becomes a parameter, described by
// the type's SwaggerDoc.
func optionParams(obj interface{ SwaggerDoc() map[string]string }, exclude ...string) []common.Parameter {
	var params []common.Parameter
	t := reflect.TypeOf(obj).Elem()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]
		if name == "" || name == "-" || contains(exclude, name) {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		dataType := ""
		switch ft.Kind() {
		case reflect.Bool:
			dataType = "boolean"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			dataType = "integer"
		case reflect.Float32, reflect.Float64:
			dataType = "number"
		case reflect.String:
			dataType = "string"
		case reflect.Slice:
			// go-restful has no array query parameters; kube-apiserver
			// documents []string as string too.
			switch ft.Elem().Kind() {
			case reflect.String:
				dataType = "string"
			case reflect.Int32, reflect.Int64:
				dataType = "integer"
			}
		}
		if dataType == "" {
			continue // structs (Preconditions, TypeMeta) are not parameters
		}
		params = append(params, queryParam(name, obj.SwaggerDoc()[name], dataType))
	}
	return params
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// groupVersionPath is where a group version is served: /api/v1 for the
// core group, /apis/<group>/<version> for the others.
func groupVersionPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// mediaTypes are the response formats, and streamMediaTypes the watch
// formats, of the codecs (kube-apiserver's MediaTypesForSerializer).
func mediaTypes() (media, stream []string) {
	for _, info := range registry.Codecs.SupportedMediaTypes() {
		media = append(media, info.MediaType)
		if info.StreamSerializer != nil {
			stream = append(stream, info.MediaType+";stream=watch")
		}
	}
	return media, stream
}

// patchTypes are the PATCH bodies Concord accepts.
var patchTypes = []string{
	string(types.JSONPatchType),
	string(types.MergePatchType),
	string(types.StrategicMergePatchType),
	string(types.ApplyYAMLPatchType),
}

// action is one route of a resource, as kube-apiserver's installer lists
// them: verb, path below the group version, and the parameters in the path.
type action struct {
	verb          string // GET, LIST, POST, PUT, PATCH, DELETE, DELETECOLLECTION, WATCH, WATCHLIST
	path          string
	params        []common.Parameter
	allNamespaces bool
}

// resourceRoutes returns the routes kube-apiserver registers for res: the
// same paths, operation names, parameters, bodies and responses, and the
// x-kubernetes-group-version-kind and x-kubernetes-action extensions that
// clients (kubectl's field validation check) look for.
func resourceRoutes(res *registry.Resource) []common.Route {
	kind := res.Kind
	obj := res.New()
	list := res.NewList()
	gvk := res.GroupVersionKind()
	media, stream := mediaTypes()
	allMedia := append(append([]string{}, media...), stream...)

	nameParam := pathParam("name", "name of the "+kind)
	var actions []action
	namespaced := ""
	if res.Namespaced {
		namespaced = "Namespaced"
		nsParam := pathParam("namespace", "object name and auth scope, such as for teams and projects")
		collection := "namespaces/{namespace}/" + res.Plural
		item := collection + "/{name}"
		nsParams := []common.Parameter{nsParam}
		itemParams := []common.Parameter{nsParam, nameParam}
		actions = []action{
			{verb: "LIST", path: collection, params: nsParams},
			{verb: "POST", path: collection, params: nsParams},
			{verb: "DELETECOLLECTION", path: collection, params: nsParams},
			{verb: "WATCHLIST", path: "watch/" + collection, params: nsParams},
			{verb: "GET", path: item, params: itemParams},
			{verb: "PUT", path: item, params: itemParams},
			{verb: "PATCH", path: item, params: itemParams},
			{verb: "DELETE", path: item, params: itemParams},
			{verb: "WATCH", path: "watch/" + item, params: itemParams},
			{verb: "LIST", path: res.Plural, allNamespaces: true},
			{verb: "WATCHLIST", path: "watch/" + res.Plural, allNamespaces: true},
		}
	} else {
		item := res.Plural + "/{name}"
		itemParams := []common.Parameter{nameParam}
		actions = []action{
			{verb: "LIST", path: res.Plural},
			{verb: "POST", path: res.Plural},
			{verb: "DELETECOLLECTION", path: res.Plural},
			{verb: "WATCHLIST", path: "watch/" + res.Plural},
			{verb: "GET", path: item, params: itemParams},
			{verb: "PUT", path: item, params: itemParams},
			{verb: "PATCH", path: item, params: itemParams},
			{verb: "DELETE", path: item, params: itemParams},
			{verb: "WATCH", path: "watch/" + item, params: itemParams},
		}
	}

	listParams := optionParams(&metav1.ListOptions{})
	var routes []common.Route
	for _, a := range actions {
		if a.verb == "DELETECOLLECTION" && !slices.Contains(res.Verbs(), "deletecollection") {
			continue
		}
		ns, suffix := namespaced, ""
		if a.allNamespaces {
			ns, suffix = "", "ForAllNamespaces"
		}
		r := &route{
			method:   http.MethodGet,
			path:     groupVersionPath(res.GroupVersion) + "/" + a.path,
			produces: media,
			metadata: map[string]interface{}{
				routeMetaGVK:    metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
				routeMetaAction: strings.ToLower(a.verb),
			},
			params: []common.Parameter{prettyParam},
		}
		ok := func(model interface{}) []common.StatusCodeResponse {
			return []common.StatusCodeResponse{response{http.StatusOK, "OK", model}}
		}
		switch a.verb {
		case "GET":
			r.operation = "read" + ns + kind + suffix
			r.description = "read the specified " + kind
			r.writes, r.responses = obj, ok(obj)
		case "LIST":
			r.operation = "list" + ns + kind + suffix
			r.description = "list or watch objects of kind " + kind
			r.produces = allMedia
			r.writes, r.responses = list, ok(list)
			r.params = append(r.params, listParams...)
		case "PUT":
			r.method = http.MethodPut
			r.operation = "replace" + ns + kind + suffix
			r.description = "replace the specified " + kind
			r.reads, r.writes = obj, obj
			r.responses = append(ok(obj), response{http.StatusCreated, "Created", obj})
			r.params = append(append(r.params, bodyParam(true)), optionParams(&metav1.UpdateOptions{})...)
		case "PATCH":
			r.method = http.MethodPatch
			r.operation = "patch" + ns + kind + suffix
			r.description = "partially update the specified " + kind
			r.consumes = patchTypes
			r.reads, r.writes = metav1.Patch{}, obj
			r.responses = append(ok(obj), response{http.StatusCreated, "Created", obj})
			r.params = append(append(r.params, bodyParam(true)), optionParams(&metav1.PatchOptions{})...)
		case "POST":
			r.method = http.MethodPost
			r.operation = "create" + ns + kind + suffix
			r.description = "create " + withArticle(kind)
			r.reads, r.writes = obj, obj
			r.responses = append(ok(obj), response{http.StatusCreated, "Created", obj}, response{http.StatusAccepted, "Accepted", obj})
			r.params = append(append(r.params, bodyParam(true)), optionParams(&metav1.CreateOptions{})...)
		case "DELETE":
			r.method = http.MethodDelete
			r.operation = "delete" + ns + kind + suffix
			r.description = "delete " + withArticle(kind)
			r.reads, r.writes = &metav1.DeleteOptions{}, &metav1.Status{}
			r.responses = append(ok(&metav1.Status{}), response{http.StatusAccepted, "Accepted", &metav1.Status{}})
			r.params = append(append(r.params, bodyParam(false)), optionParams(&metav1.DeleteOptions{})...)
		case "DELETECOLLECTION":
			r.method = http.MethodDelete
			r.operation = "deletecollection" + ns + kind + suffix
			r.description = "delete collection of " + kind
			r.reads, r.writes = &metav1.DeleteOptions{}, &metav1.Status{}
			r.responses = ok(&metav1.Status{})
			r.params = append(append(r.params, bodyParam(false)), optionParams(&metav1.DeleteOptions{})...)
			r.params = append(r.params, optionParams(&metav1.ListOptions{}, "watch", "allowWatchBookmarks")...)
		case "WATCH":
			r.operation = "watch" + ns + kind + suffix
			r.description = "watch changes to an object of kind " + kind +
				". deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter."
			r.produces = allMedia
			r.writes, r.responses = &metav1.WatchEvent{}, ok(&metav1.WatchEvent{})
			r.params = append(r.params, listParams...)
		case "WATCHLIST":
			r.operation = "watch" + ns + kind + "List" + suffix
			r.description = "watch individual changes to a list of " + kind + ". deprecated: use the 'watch' parameter with a list operation instead."
			r.produces = allMedia
			r.writes, r.responses = &metav1.WatchEvent{}, ok(&metav1.WatchEvent{})
			r.params = append(r.params, listParams...)
		}
		r.params = append(r.params, a.params...)
		routes = append(routes, r)
	}
	return routes
}

// withArticle puts "a" or "an" before noun, as kube-apiserver's
// GetArticleForNoun does (plurals get none).
func withArticle(noun string) string {
	switch {
	case strings.HasSuffix(noun, "s") && !strings.HasSuffix(noun, "ss"):
		return noun
	case strings.ContainsRune("aeiou", unicode.ToLower(rune(noun[0]))):
		return "an " + noun
	default:
		return "a " + noun
	}
}
