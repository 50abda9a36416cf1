package registry

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// Apply is a server-side apply of patch (YAML, or JSON) to namespace/name
// by opts.FieldManager: kube-apiserver's applyPatcher, merged and owned by
// its field manager (managedfields.go), in the write loop of every patch —
// one etcd transaction guarded by the revision read, applied again to the
// new state when another write lands first. A field another manager owns
// with another value is a 409 naming each conflict, unless opts.Force; a
// field the manager alone owned and no longer applies is removed. A
// missing object is created (created is true), unless a resourceVersion in
// patch or opts.IfMatch says which version it must be (404). The patch
// names the object: its apiVersion, kind and name must be the URL's.
func (s *Store) Apply(ctx context.Context, namespace, name string, patch []byte, opts WriteOptions) (_ Object, created bool, _ error) {
	applied, strictErr, err := decodeApplied(patch, opts)
	if err != nil {
		return nil, false, err
	}
	m, err := s.fieldManager(opts)
	if err != nil {
		return nil, false, apierrors.NewInternalError(err)
	}
	opts.applied, opts.Decoded = true, true
	return s.replace(ctx, namespace, name, opts, func(old Object) (Object, error) {
		live := old
		if live == nil {
			live = s.Resource.New()
		}
		out, err := m.Apply(live, applied.DeepCopy(), opts.FieldManager, opts.Force)
		if err != nil {
			return nil, s.applyStatus(err, applied)
		}
		obj, ok := out.(Object)
		if !ok {
			return nil, fmt.Errorf("registry: apply to %s made a %T", s.Resource.GroupResource(), out)
		}
		if err := strictApplied(strictErr, opts); err != nil {
			return nil, err
		}
		if err := s.checkApplied(namespace, name, obj, old, opts); err != nil {
			return nil, err
		}
		storedTimes(obj)
		return obj, nil
	})
}

// ApplyStatus is Apply through the status subresource, as PatchStatus is
// Patch: the status of the result is written, and a missing object is 404.
func (s *Store) ApplyStatus(ctx context.Context, namespace, name string, patch []byte, opts WriteOptions) (Object, error) {
	if err := s.checkStatus(); err != nil {
		return nil, err
	}
	opts.status = true
	out, _, err := s.Apply(ctx, namespace, name, patch, opts)
	return out, err
}

// checkApplied refuses what kube's patcher refuses of an applied object:
// another name or namespace than the URL's, and, when the object is
// missing, a uid (409) or a version to be at (404).
func (s *Store) checkApplied(namespace, name string, obj, old Object, opts WriteOptions) error {
	gr := s.Resource.GroupResource()
	if old == nil {
		if uid := obj.GetUID(); uid != "" {
			return apierrors.NewConflict(gr, name, fmt.Errorf("uid mismatch: the provided object specified uid %s, and no existing object was found", uid))
		}
		if obj.GetResourceVersion() != "" || opts.IfMatch != nil {
			return apierrors.NewNotFound(gr, name)
		}
	}
	switch obj.GetName() {
	case name:
	case "":
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s based on URL) was undeterminable: name must be provided", name))
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), name))
	}
	return s.checkNamespace(namespace, obj)
}

// decodeApplied is the object patch applies, and, for fieldValidation
// Strict and Warn, its duplicate fields (kube checks only these: the types
// refuse unknown ones).
func decodeApplied(patch []byte, opts WriteOptions) (applied *unstructured.Unstructured, strictErr, _ error) {
	if _, err := yaml.ToJSON(patch); err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error encoding patch: %v", err))
	}
	applied = &unstructured.Unstructured{Object: map[string]any{}}
	if err := yaml.Unmarshal(patch, &applied.Object); err != nil {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding patch: %v", err))
	}
	if opts.StrictFields || opts.Warnings != nil {
		strictErr = yaml.UnmarshalStrict(patch, &map[string]any{})
	}
	return applied, strictErr, nil
}

// strictApplied answers an applied object's duplicate fields, once it is
// merged, as kube does: 400 for Strict, warnings for Warn.
func strictApplied(strictErr error, opts WriteOptions) error {
	if strictErr != nil && opts.StrictFields {
		return apierrors.NewBadRequest(fmt.Sprintf("error strict decoding patch: %v", strictErr))
	}
	if opts.Warnings != nil {
		var warnings []string
		if strictErr != nil {
			warnings = yamlWarnings(strictErr)
		}
		opts.Warnings(warnings)
	}
	return nil
}

// yamlWarnings are the warnings of a strict YAML decoding error as kube
// answers them (parseYAMLWarnings): one per line of its list, without its
// heading.
func yamlWarnings(err error) []string {
	text := err.Error()
	var list string
	for _, heading := range []string{"yaml: unmarshal errors:\n", "error converting YAML to JSON: yaml: unmarshal errors:\n"} {
		if rest, ok := strings.CutPrefix(text, heading); ok {
			list = rest
			break
		}
	}
	if list == "" {
		return []string{text}
	}
	lines := strings.Split(list, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return lines
}
