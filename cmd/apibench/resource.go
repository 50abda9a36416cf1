package main

import (
	"encoding/json"
	"net/url"
)

// resource is what the workloads of an API target write: ConfigMaps, or
// widgets, a custom resource of group bench.concord.dev whose CRD apibench
// installs (widgetCRD). Both carry the workload's data as a map of
// strings: a ConfigMap in data, a widget in spec.data.
type resource struct {
	// Name is the --resource value, the resource's plural.
	Name    string
	Group   string // "" for the core group
	Version string
	Kind    string
	// Custom: a CustomResourceDefinition defines it (installCRD).
	Custom bool
}

var (
	configMaps = resource{Name: "configmaps", Version: "v1", Kind: "ConfigMap"}
	widgets    = resource{Name: "widgets", Group: "bench.concord.dev", Version: "v1", Kind: "Widget", Custom: true}
)

// resourceNamed is the resource of a --resource value (Validate refuses
// the others).
func resourceNamed(name string) resource {
	if name == widgets.Name {
		return widgets
	}
	return configMaps
}

func (r resource) apiVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// collection is the path of the resource's objects in namespace ns.
func (r resource) collection(ns string) string {
	if r.Group == "" {
		return "/api/" + r.Version + "/namespaces/" + url.PathEscape(ns) + "/" + r.Name
	}
	return "/apis/" + r.Group + "/" + r.Version + "/namespaces/" + url.PathEscape(ns) + "/" + r.Name
}

// crdName is the name of the CRD that defines a custom resource.
func (r resource) crdName() string { return r.Name + "." + r.Group }

// apiObject is the JSON of a ConfigMap or of a widget, as much of them as
// apibench writes and reads. Kind and apiVersion come first, as Concord
// stores a ConfigMap.
type apiObject struct {
	Kind       string            `json:"kind,omitempty"`
	APIVersion string            `json:"apiVersion,omitempty"`
	Metadata   objectMeta        `json:"metadata"`
	Data       map[string]string `json:"data,omitempty"`
	Spec       *widgetSpec       `json:"spec,omitempty"`
}

// widgetSpec is a widget's spec: the CRD's CEL rule checks replicas <=
// maxReplicas on every write.
type widgetSpec struct {
	Replicas    int               `json:"replicas"`
	MaxReplicas int               `json:"maxReplicas"`
	Data        map[string]string `json:"data,omitempty"`
}

// Every widget apibench writes: the CEL rule holds.
const (
	widgetReplicas    = 1
	widgetMaxReplicas = 3
)

// object is the body apibench sends for the object; rv is "" for a create.
func (r resource) object(ns, name, rv string, data map[string]string) *apiObject {
	o := &apiObject{Kind: r.Kind, APIVersion: r.apiVersion(), Metadata: objectMeta{Name: name, Namespace: ns, ResourceVersion: rv}}
	if r.Custom {
		o.Spec = &widgetSpec{Replicas: widgetReplicas, MaxReplicas: widgetMaxReplicas, Data: data}
	} else {
		o.Data = data
	}
	return o
}

// data is the workload's data the object carries.
func (o *apiObject) data() map[string]string {
	if o.Spec != nil {
		return o.Spec.Data
	}
	return o.Data
}

// payloadSize is the length of the payload the resource's objects carry
// for --object-size n: n for a ConfigMap; for a custom object n less what
// its JSON has more than a ConfigMap's (a longer apiVersion, the spec and
// its replicas), so that the bodies of both are equally long.
func (r resource) payloadSize(n int) int {
	if !r.Custom {
		return n
	}
	size := func(res resource) int {
		b, _ := json.Marshal(res.object("ns", "name", "", map[string]string{"payload": ""}))
		return len(b)
	}
	return max(n-(size(r)-size(configMaps)), 1)
}

// widgetCRD is the CustomResourceDefinition of widgets: a small schema and
// one CEL rule (x-kubernetes-validations), which Concord evaluates on every
// create and update of a widget, as kube-apiserver does.
const widgetCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.bench.concord.dev", "labels": {"app.kubernetes.io/managed-by": "apibench"}},
  "spec": {
    "group": "bench.concord.dev",
    "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
          "spec": {
            "type": "object",
            "required": ["replicas", "maxReplicas"],
            "x-kubernetes-validations": [{"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"}],
            "properties": {
              "replicas": {"type": "integer", "minimum": 0},
              "maxReplicas": {"type": "integer", "minimum": 0},
              "data": {"type": "object", "additionalProperties": {"type": "string"}}
            }
          }
        }
      }}
    }]
  }
}`
