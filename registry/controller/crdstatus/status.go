// Package crdstatus sets the status of CustomResourceDefinitions as
// kube-apiserver's naming and establishing controllers do: the names a CRD
// may serve under (status.acceptedNames), and its NamesAccepted and
// Established conditions. Every replica runs it, as every kube-apiserver
// runs those controllers: each status write is guarded by the CRD's
// resourceVersion, so when replicas race one write wins and the others
// see its result in their watch.
package crdstatus

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/concord-dev/concord/registry"
	"github.com/concord-dev/concord/registry/controller"
)

// rewatchDelay is the pause before the CRD watch is opened again.
const rewatchDelay = 500 * time.Millisecond

// Controller keeps the CRDs' names and conditions.
type Controller struct {
	crds *registry.Store
	log  *slog.Logger
	// known is the last state seen of every CRD, by name: the names other
	// CRDs of a group hold.
	known map[string]*apiextensionsv1.CustomResourceDefinition
}

// New returns the controller of the CRDs in crds.
func New(crds *registry.Store, log *slog.Logger) *Controller {
	return &Controller{crds: crds, log: log}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	var pending []string // CRDs seen in the initial events, decided after them
	controller.Watch(ctx, c.crds, controller.WatchOptions{Name: "CRD status", Log: c.log, RewatchDelay: rewatchDelay}, controller.Handler[*apiextensionsv1.CustomResourceDefinition]{
		Opened: func(context.Context) error {
			c.known = map[string]*apiextensionsv1.CustomResourceDefinition{}
			pending = nil
			return nil
		},
		Event: func(ctx context.Context, typ watch.EventType, crd *apiextensionsv1.CustomResourceDefinition, initial bool) error {
			switch typ {
			case watch.Added, watch.Modified:
				c.known[crd.Name] = crd
				if initial {
					pending = append(pending, crd.Name)
					return nil
				}
				c.sync(ctx, crd.Name)
			case watch.Deleted:
				delete(c.known, crd.Name)
				// A name it held may free another CRD of its group.
				for name, other := range c.known {
					if other.Spec.Group == crd.Spec.Group {
						c.sync(ctx, name)
					}
				}
			}
			return nil
		},
		Synced: func(ctx context.Context, _ int64) error {
			for _, name := range pending {
				c.sync(ctx, name)
			}
			pending = nil
			return nil
		},
	})
}

// sync writes the status the CRD name should have, if it differs.
func (c *Controller) sync(ctx context.Context, name string) {
	crd := c.known[name]
	if crd == nil {
		return
	}
	want := Status(crd, c.others(crd), time.Now())
	if reflect.DeepEqual(want, crd.Status) {
		return
	}
	next := crd.DeepCopy()
	next.Status = want
	if _, err := c.crds.UpdateStatus(ctx, "", name, next, registry.WriteOptions{FieldManager: registry.ServerFieldManager}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return // another replica wrote first, or it is gone: the watch brings what it is now
		}
		c.log.Warn("CRD status: could not write the status", "crd", name, "err", err)
	}
}

func (c *Controller) others(crd *apiextensionsv1.CustomResourceDefinition) []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	for name, other := range c.known {
		if name != crd.Name && other.Spec.Group == crd.Spec.Group {
			out = append(out, other)
		}
	}
	return out
}

// Status is the status crd should have, given the other CRDs of its group,
// as kube's naming controller computes it (calculateNamesAndConditions):
// each requested name is accepted unless another CRD of the group holds
// it; NamesAccepted says which conflicts; Established becomes True once
// all names were accepted (kube's establishing controller does this a
// moment later; the end state is the same) and stays True. The status's
// other fields are kept.
func Status(crd *apiextensionsv1.CustomResourceDefinition, others []*apiextensionsv1.CustomResourceDefinition, now time.Time) apiextensionsv1.CustomResourceDefinitionStatus {
	resources, kinds := map[string]bool{}, map[string]bool{}
	for _, o := range others {
		n := o.Status.AcceptedNames
		for _, r := range append([]string{n.Plural, n.Singular}, n.ShortNames...) {
			resources[r] = true
		}
		kinds[n.Kind], kinds[n.ListKind] = true, true
	}
	requested, accepted := crd.Spec.Names, crd.Status.AcceptedNames
	names := accepted
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"}
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, err.Error()
	}
	if err := freeOrOurs(requested.Plural, accepted.Plural, resources); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = requested.Plural
	}
	if err := freeOrOurs(requested.Singular, accepted.Singular, resources); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = requested.Singular
	}
	if !slices.Equal(requested.ShortNames, accepted.ShortNames) {
		var errs []error
		for _, short := range requested.ShortNames {
			if slices.Contains(accepted.ShortNames, short) {
				continue
			}
			if err := freeOrOurs(short, "", resources); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			conflict("ShortNamesConflict", aggregate(errs))
		} else {
			names.ShortNames = requested.ShortNames
		}
	}
	if err := freeOrOurs(requested.Kind, accepted.Kind, kinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = requested.Kind
	}
	if err := freeOrOurs(requested.ListKind, accepted.ListKind, kinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = requested.ListKind
	}
	names.Categories = requested.Categories

	established := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"}
	if old := find(crd.Status.Conditions, apiextensionsv1.Established); old != nil {
		established = *old
	}
	if established.Status != apiextensionsv1.ConditionTrue && cond.Status == apiextensionsv1.ConditionTrue {
		established = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"}
	}

	next := crd.DeepCopy()
	next.Status.AcceptedNames = names
	registry.SetCRDCondition(next, cond, now)
	registry.SetCRDCondition(next, established, now)
	return next.Status
}

func freeOrOurs(requested, accepted string, used map[string]bool) error {
	if requested == accepted || !used[requested] {
		return nil
	}
	return fmt.Errorf("%q is already in use", requested)
}

// aggregate joins errors as apimachinery's utilerrors.NewAggregate prints
// them ("[a, b]" for several).
func aggregate(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	msg := "["
	for i, err := range errs {
		if i > 0 {
			msg += ", "
		}
		msg += err.Error()
	}
	return fmt.Errorf("%s]", msg)
}

func find(conds []apiextensionsv1.CustomResourceDefinitionCondition, t apiextensionsv1.CustomResourceDefinitionConditionType) *apiextensionsv1.CustomResourceDefinitionCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
