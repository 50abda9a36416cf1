package registry

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Events are core/v1 Events, stored as kube stores them: one key space,
// /registry/events/<namespace>/<name>, holding core/v1 Event objects. They
// live for --event-ttl after their last write (etcdstore.Options.TTL).
var Events = &Resource{
	GroupVersion: corev1.SchemeGroupVersion,
	Kind:         "Event",
	Plural:       "events",
	Singular:     "event",
	ShortNames:   []string{"ev"},
	Namespaced:   true,
	// kube validates core/v1 Event names as path segments only.
	NameValidation:   path.ValidatePathSegmentName,
	New:              func() Object { return &corev1.Event{} },
	NewList:          func() runtime.Object { return &corev1.EventList{} },
	Strategy:         eventStrategy{},
	TableColumns:     eventColumns,
	TableCells:       func(obj Object) []any { return eventCells(obj.(*corev1.Event)) },
	TableColumnsOnly: true,
	SelectableFields: []string{
		"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
		"involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
		"reason", "reportingComponent", "source", "type", "metadata.namespace", "metadata.name",
	},
	FieldSet: func(obj Object) fields.Set { return eventFields(obj.(*corev1.Event)) },
	// As kube's event strategy (both versions).
	AllowUnconditionalUpdate: true,
	AllowCreateOnUpdate:      true,
}

// EventsV1 are events.k8s.io/v1 Events: the same stored objects as Events,
// converted field by field as kube's pkg/apis/events/v1 conversion does,
// with kube's stricter validation for writes of this version.
var EventsV1 = &Resource{
	GroupVersion:     eventsv1.SchemeGroupVersion,
	Kind:             "Event",
	Plural:           "events",
	Singular:         "event",
	ShortNames:       []string{"ev"},
	Namespaced:       true,
	NameValidation:   apivalidation.NameIsDNSSubdomain,
	New:              func() Object { return &eventsv1.Event{} },
	NewList:          func() runtime.Object { return &eventsv1.EventList{} },
	Strategy:         eventsV1Strategy{},
	TableColumns:     eventColumns,
	TableCells:       func(obj Object) []any { return eventCells(eventFromV1(obj.(*eventsv1.Event))) },
	TableColumnsOnly: true,
	// kube's field label conversion for events.k8s.io/v1: regarding.* and
	// reportingController name the core fields.
	SelectableFields: []string{
		"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
		"regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath",
		"reason", "reportingController", "source", "type", "metadata.namespace", "metadata.name",
	},
	FieldSet:                 func(obj Object) fields.Set { return eventsV1Fields(obj.(*eventsv1.Event)) },
	AllowUnconditionalUpdate: true,
	AllowCreateOnUpdate:      true,
	Storage: &StorageVersion{
		Of:         Events,
		ToStored:   func(obj Object) (Object, error) { return eventFromV1(obj.(*eventsv1.Event)), nil },
		FromStored: func(obj Object) (Object, error) { return eventToV1(obj.(*corev1.Event)), nil },
	},
}

// eventToV1 is kube's Convert_core_Event_To_v1_Event: involvedObject is
// regarding, message is note, and source, firstTimestamp, lastTimestamp
// and count are the deprecated* fields.
func eventToV1(in *corev1.Event) *eventsv1.Event {
	in = in.DeepCopy()
	out := &eventsv1.Event{
		ObjectMeta:               in.ObjectMeta,
		EventTime:                in.EventTime,
		ReportingController:      in.ReportingController,
		ReportingInstance:        in.ReportingInstance,
		Action:                   in.Action,
		Reason:                   in.Reason,
		Regarding:                in.InvolvedObject,
		Related:                  in.Related,
		Note:                     in.Message,
		Type:                     in.Type,
		DeprecatedSource:         in.Source,
		DeprecatedFirstTimestamp: in.FirstTimestamp,
		DeprecatedLastTimestamp:  in.LastTimestamp,
		DeprecatedCount:          in.Count,
	}
	if in.Series != nil {
		out.Series = &eventsv1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
	out.SetGroupVersionKind(eventsv1.SchemeGroupVersion.WithKind("Event"))
	return out
}

// eventFromV1 is kube's Convert_v1_Event_To_core_Event, eventToV1 reversed.
func eventFromV1(in *eventsv1.Event) *corev1.Event {
	in = in.DeepCopy()
	out := &corev1.Event{
		ObjectMeta:          in.ObjectMeta,
		InvolvedObject:      in.Regarding,
		Reason:              in.Reason,
		Message:             in.Note,
		Source:              in.DeprecatedSource,
		FirstTimestamp:      in.DeprecatedFirstTimestamp,
		LastTimestamp:       in.DeprecatedLastTimestamp,
		Count:               in.DeprecatedCount,
		Type:                in.Type,
		EventTime:           in.EventTime,
		Related:             in.Related,
		ReportingController: in.ReportingController,
		ReportingInstance:   in.ReportingInstance,
		Action:              in.Action,
	}
	if in.Series != nil {
		out.Series = &corev1.EventSeries{Count: in.Series.Count, LastObservedTime: in.Series.LastObservedTime}
	}
	out.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Event"))
	return out
}

// eventFields is kube's event ToSelectableFields: source is the source
// component, else the reporting controller.
func eventFields(e *corev1.Event) fields.Set {
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	return fields.Set{
		"involvedObject.kind":            e.InvolvedObject.Kind,
		"involvedObject.namespace":       e.InvolvedObject.Namespace,
		"involvedObject.name":            e.InvolvedObject.Name,
		"involvedObject.uid":             string(e.InvolvedObject.UID),
		"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
		"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
		"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
		"reason":                         e.Reason,
		"reportingComponent":             e.ReportingController,
		"source":                         source,
		"type":                           e.Type,
		"metadata.namespace":             e.Namespace,
		"metadata.name":                  e.Name,
	}
}

// eventsV1Fields are eventFields under the names events.k8s.io/v1 gives
// them.
func eventsV1Fields(e *eventsv1.Event) fields.Set {
	core := eventFields(eventFromV1(e))
	set := fields.Set{}
	for name, value := range core {
		switch {
		case strings.HasPrefix(name, "involvedObject."):
			name = "regarding." + strings.TrimPrefix(name, "involvedObject.")
		case name == "reportingComponent":
			name = "reportingController"
		}
		set[name] = value
	}
	return set
}

// eventColumns are kube's Event printer columns (pkg/printers/internalversion);
// the priority 1 columns show with kubectl get -o wide.
var eventColumns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: corev1.Event{}.SwaggerDoc()["lastTimestamp"]},
	{Name: "Type", Type: "string", Description: corev1.Event{}.SwaggerDoc()["type"]},
	{Name: "Reason", Type: "string", Description: corev1.Event{}.SwaggerDoc()["reason"]},
	{Name: "Object", Type: "string", Description: corev1.Event{}.SwaggerDoc()["involvedObject"]},
	{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]},
	{Name: "Source", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["source"]},
	{Name: "Message", Type: "string", Description: corev1.Event{}.SwaggerDoc()["message"]},
	{Name: "First Seen", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["firstTimestamp"]},
	{Name: "Count", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["count"]},
	{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
}

// eventCells is kube's printEvent (wide, as kube-apiserver prints tables).
func eventCells(e *corev1.Event) []any {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "<unknown>"
		}
		return duration.HumanDuration(time.Since(t))
	}
	first := since(e.FirstTimestamp.Time)
	if e.FirstTimestamp.IsZero() {
		first = since(e.EventTime.Time)
	}
	last := since(e.LastTimestamp.Time)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last, count = since(e.Series.LastObservedTime.Time), e.Series.Count
	} else if count == 0 {
		count = 1 // a singleton event of the new API has no count
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	firstNonEmpty := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	source := firstNonEmpty(e.Source.Component, e.ReportingController)
	if instance := firstNonEmpty(e.Source.Host, e.ReportingInstance); instance != "" {
		source += ", " + instance
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source,
		strings.TrimSpace(e.Message), first, int64(count), e.Name}
}

// kube's limits on Event fields (pkg/apis/core/validation/events.go).
const (
	eventReportingInstanceLimit = 128
	eventActionLimit            = 128
	eventReasonLimit            = 128
	eventNoteLimit              = 1024
)

type eventStrategy struct{}

var _ Strategy = eventStrategy{}

func (eventStrategy) PrepareForCreate(Object)         {}
func (eventStrategy) PrepareForUpdate(Object, Object) {}

// Validate is kube's ValidateEventCreate for a core/v1 request: the
// legacy rules only.
func (eventStrategy) Validate(obj Object) field.ErrorList {
	return validateEvent(obj.(*corev1.Event), corev1.SchemeGroupVersion)
}

// ValidateUpdate is kube's ValidateEventUpdate for a core/v1 request.
func (eventStrategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return validateEventUpdate(obj.(*corev1.Event), old.(*corev1.Event), corev1.SchemeGroupVersion)
}

type eventsV1Strategy struct{}

var _ Strategy = eventsV1Strategy{}

func (eventsV1Strategy) PrepareForCreate(Object)         {}
func (eventsV1Strategy) PrepareForUpdate(Object, Object) {}

// Validate is kube's ValidateEventCreate for an events.k8s.io/v1 request:
// the legacy rules and the strict ones, on the core form (so the causes
// name the core fields, as kube's do).
func (eventsV1Strategy) Validate(obj Object) field.ErrorList {
	return validateEvent(eventFromV1(obj.(*eventsv1.Event)), eventsv1.SchemeGroupVersion)
}

// ValidateUpdate is kube's ValidateEventUpdate for an events.k8s.io/v1
// request.
func (eventsV1Strategy) ValidateUpdate(obj, old Object) field.ErrorList {
	return validateEventUpdate(eventFromV1(obj.(*eventsv1.Event)), eventFromV1(old.(*eventsv1.Event)), eventsv1.SchemeGroupVersion)
}

// validateEvent is kube's ValidateEventCreate (ObjectMeta, names included,
// is checked by the store with the declaration's NameValidation).
func validateEvent(e *corev1.Event, requestVersion schema.GroupVersion) field.ErrorList {
	errs := legacyValidateEvent(e)
	if requestVersion == corev1.SchemeGroupVersion {
		return errs // no further validation, for backwards compatibility
	}
	errs = append(errs, validateEventSeries(e)...)
	if e.EventTime.IsZero() {
		errs = append(errs, field.Required(field.NewPath("eventTime"), ""))
	}
	if e.Type != corev1.EventTypeNormal && e.Type != corev1.EventTypeWarning {
		errs = append(errs, field.Invalid(field.NewPath("type"), "", fmt.Sprintf("has invalid value: %v", e.Type)))
	}
	if !e.FirstTimestamp.IsZero() {
		errs = append(errs, field.Invalid(field.NewPath("firstTimestamp"), "", "needs to be unset"))
	}
	if !e.LastTimestamp.IsZero() {
		errs = append(errs, field.Invalid(field.NewPath("lastTimestamp"), "", "needs to be unset"))
	}
	if e.Count != 0 {
		errs = append(errs, field.Invalid(field.NewPath("count"), "", "needs to be unset"))
	}
	if e.Source.Component != "" || e.Source.Host != "" {
		errs = append(errs, field.Invalid(field.NewPath("source"), "", "needs to be unset"))
	}
	return errs
}

// validateEventUpdate is kube's ValidateEventUpdate (ObjectMeta updates are
// checked by the store).
func validateEventUpdate(e, old *corev1.Event, requestVersion schema.GroupVersion) field.ErrorList {
	errs := legacyValidateEvent(e)
	if requestVersion == corev1.SchemeGroupVersion {
		return errs
	}
	if !reflect.DeepEqual(e.Series, old.Series) {
		errs = append(errs, validateEventSeries(e)...)
	}
	immutable := func(name string, now, before any) {
		errs = append(errs, apivalidation.ValidateImmutableField(now, before, field.NewPath(name))...)
	}
	immutable("involvedObject", e.InvolvedObject, old.InvolvedObject)
	immutable("reason", e.Reason, old.Reason)
	immutable("message", e.Message, old.Message)
	immutable("source", e.Source, old.Source)
	immutable("firstTimestamp", e.FirstTimestamp, old.FirstTimestamp)
	immutable("lastTimestamp", e.LastTimestamp, old.LastTimestamp)
	immutable("count", e.Count, old.Count)
	immutable("reason", e.Reason, old.Reason)
	immutable("type", e.Type, old.Type)
	immutable("eventTime", e.EventTime, old.EventTime)
	immutable("action", e.Action, old.Action)
	immutable("related", e.Related, old.Related)
	immutable("reportingController", e.ReportingController, old.ReportingController)
	immutable("reportingInstance", e.ReportingInstance, old.ReportingInstance)
	return errs
}

func validateEventSeries(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	if e.Series != nil {
		if e.Series.Count < 2 {
			errs = append(errs, field.Invalid(field.NewPath("series.count"), "", "should be at least 2"))
		}
		if e.Series.LastObservedTime.IsZero() {
			errs = append(errs, field.Required(field.NewPath("series.lastObservedTime"), ""))
		}
	}
	return errs
}

// legacyValidateEvent is kube's: the rules every Event passes, in either
// version. An event without eventTime is an old-style one, whose namespace
// must agree with its involved object's; one with eventTime must say who
// reported it, what happened and why, within kube's limits.
func legacyValidateEvent(e *corev1.Event) field.ErrorList {
	var errs field.ErrorList
	involvedNamespace := field.NewPath("involvedObject", "namespace")
	if e.EventTime.IsZero() {
		if e.InvolvedObject.Namespace == "" {
			// The event's namespace must be empty too, or "default" for
			// old clients.
			if e.Namespace != metav1.NamespaceNone && e.Namespace != metav1.NamespaceDefault {
				errs = append(errs, field.Invalid(involvedNamespace, e.InvolvedObject.Namespace, "does not match event.namespace"))
			}
		} else if e.Namespace != e.InvolvedObject.Namespace {
			errs = append(errs, field.Invalid(involvedNamespace, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
	} else {
		if e.InvolvedObject.Namespace == "" && e.Namespace != metav1.NamespaceDefault && e.Namespace != metav1.NamespaceSystem {
			errs = append(errs, field.Invalid(involvedNamespace, e.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		if e.ReportingController == "" {
			errs = append(errs, field.Required(field.NewPath("reportingController"), ""))
		}
		for _, msg := range validation.IsQualifiedName(e.ReportingController) {
			errs = append(errs, field.Invalid(field.NewPath("reportingController"), e.ReportingController, msg))
		}
		if e.ReportingInstance == "" {
			errs = append(errs, field.Required(field.NewPath("reportingInstance"), ""))
		}
		if len(e.ReportingInstance) > eventReportingInstanceLimit {
			errs = append(errs, field.Invalid(field.NewPath("reportingInstance"), "", fmt.Sprintf("can have at most %v characters", eventReportingInstanceLimit)))
		}
		if e.Action == "" {
			errs = append(errs, field.Required(field.NewPath("action"), ""))
		}
		if len(e.Action) > eventActionLimit {
			errs = append(errs, field.Invalid(field.NewPath("action"), "", fmt.Sprintf("can have at most %v characters", eventActionLimit)))
		}
		if e.Reason == "" {
			errs = append(errs, field.Required(field.NewPath("reason"), ""))
		}
		if len(e.Reason) > eventReasonLimit {
			errs = append(errs, field.Invalid(field.NewPath("reason"), "", fmt.Sprintf("can have at most %v characters", eventReasonLimit)))
		}
		if len(e.Message) > eventNoteLimit {
			errs = append(errs, field.Invalid(field.NewPath("message"), "", fmt.Sprintf("can have at most %v characters", eventNoteLimit)))
		}
	}
	for _, msg := range validation.IsDNS1123Subdomain(e.Namespace) {
		errs = append(errs, field.Invalid(field.NewPath("namespace"), e.Namespace, msg))
	}
	return errs
}
