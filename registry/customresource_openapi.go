package registry

import (
	"reflect"

	"github.com/go-openapi/swag"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// openAPIChecker reports whether kube-openapi's SchemaValidator for a
// schema (as apiextensions' NewSchemaValidator builds it: strfmt.Default
// formats) finds no error in a value. It walks the schema and the value as
// that validator does and applies the same checks — kube-openapi's exported
// ones (lengths, patterns, formats, bounds, multiples, item counts,
// uniqueness), and its type and enum rules as they are written there — but
// builds nothing per value: the validator allocates a validator tree for
// every value it visits, which made the OpenAPI validation most of the CPU
// of a custom object's write.
//
// It answers true only when every check passed. It answers false for a
// value the validator refuses and for anything it does not follow (allOf,
// anyOf, oneOf, not, dependencies, patternProperties, tuple items,
// additionalItems, $ref, values of Go types JSON decoding does not give):
// then kube's validator, which is the one that gives the causes, runs and
// decides. So a write is accepted or refused, with the same causes, as kube
// would, and an accepted one costs a walk.
type openAPIChecker struct {
	s *spec.Schema
	// follows is false for a schema node openAPIChecker leaves to kube.
	follows bool
	// properties, items and additional are the checkers of s's
	// properties, items and additionalProperties schemas.
	properties map[string]*openAPIChecker
	items      *openAPIChecker
	additional *openAPIChecker
}

// newOpenAPIChecker prepares the checker of schema (nil: accepts all).
func newOpenAPIChecker(schema *spec.Schema) *openAPIChecker {
	if schema == nil {
		return nil
	}
	s := schema
	c := &openAPIChecker{s: s, follows: s.Ref.String() == "" && len(s.AllOf) == 0 && len(s.AnyOf) == 0 && len(s.OneOf) == 0 &&
		s.Not == nil && len(s.Dependencies) == 0 && len(s.PatternProperties) == 0 && s.AdditionalItems == nil && (s.Items == nil || len(s.Items.Schemas) == 0)}
	if len(s.Properties) > 0 {
		c.properties = make(map[string]*openAPIChecker, len(s.Properties))
		for name := range s.Properties {
			property := s.Properties[name]
			c.properties[name] = newOpenAPIChecker(&property)
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		c.items = newOpenAPIChecker(s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		c.additional = newOpenAPIChecker(s.AdditionalProperties.Schema)
	}
	return c
}

// openAPIAccepts is newOpenAPIChecker(schema).accepts(data).
func openAPIAccepts(schema *spec.Schema, data any) bool {
	return newOpenAPIChecker(schema).accepts(data)
}

// accepts is kube-openapi's SchemaValidator.Validate(data).IsValid(), or
// false.
func (c *openAPIChecker) accepts(data any) bool {
	if c == nil {
		return true
	}
	if !c.follows {
		return false
	}
	s := c.s
	if data == nil {
		// kube-openapi checks a null with the type and enum rules only.
		return (len(s.Type) == 0 || s.Type.Contains("null") || s.Nullable) && len(s.Enum) == 0
	}
	switch data.(type) {
	case bool, string, int64, float64, []any, map[string]any:
	default:
		return false
	}
	if (len(s.Type) > 0 || s.Format != "") && !openAPITypeAccepts(s, data) {
		return false
	}
	if len(s.Enum) > 0 && !openAPIEnumAccepts(s.Enum, data) {
		return false
	}
	switch v := data.(type) {
	case string:
		if s.MaxLength != nil && validate.MaxLength("", "", v, *s.MaxLength) != nil {
			return false
		}
		if s.MinLength != nil && validate.MinLength("", "", v, *s.MinLength) != nil {
			return false
		}
		if s.Pattern != "" && validate.Pattern("", "", v, s.Pattern) != nil {
			return false
		}
		if strfmt.Default.ContainsName(s.Format) && validate.FormatOf("", "", s.Format, v, strfmt.Default) != nil {
			return false
		}
	case int64, float64:
		return openAPINumberAccepts(s, data)
	case []any:
		return c.sliceAccepts(v)
	case map[string]any:
		return c.objectAccepts(v)
	}
	return true
}

// openAPITypeAccepts is kube-openapi's typeValidator.Validate for the Go
// types of decoded JSON.
func openAPITypeAccepts(s *spec.Schema, data any) bool {
	var schType, format string
	isString, isSlice := false, false
	switch data.(type) {
	case bool:
		schType = "boolean"
	case string:
		schType, isString = "string", true
	case int64:
		schType, format = "integer", "int64"
	case float64:
		schType, format = "number", "float64"
	case []any:
		schType, isSlice = "array", true
	case map[string]any:
		schType = "object"
	}
	isLowerInt := s.Format == "int64" && format == "int32"
	isLowerFloat := s.Format == "float64" && format == "float32"
	isFloatInt := schType == "number" && swag.IsFloat64AJSONInteger(data.(float64)) && s.Type.Contains("integer")
	isIntFloat := schType == "integer" && s.Type.Contains("number")
	if !isString && !isSlice && s.Format != "" && !(s.Type.Contains(schType) || format == s.Format || isFloatInt || isIntFloat || isLowerInt || isLowerFloat) {
		return false
	}
	if !(s.Type.Contains("number") || s.Type.Contains("integer")) && s.Format != "" && (isString || isSlice) {
		return true
	}
	return s.Type.Contains(schType) || isFloatInt || isIntFloat
}

// openAPIEnumAccepts is kube-openapi's basicCommonValidator.Validate.
func openAPIEnumAccepts(enum []any, data any) bool {
	for _, enumValue := range enum {
		actualType := reflect.TypeOf(enumValue)
		if actualType == nil {
			continue
		}
		expectedValue := reflect.ValueOf(data)
		if expectedValue.IsValid() && expectedValue.Type().ConvertibleTo(actualType) {
			if reflect.DeepEqual(expectedValue.Convert(actualType).Interface(), enumValue) {
				return true
			}
		}
	}
	return false
}

// openAPINumberAccepts is kube-openapi's numberValidator.Validate; a bound
// outside the format's range is an error there, and false here.
func openAPINumberAccepts(s *spec.Schema, data any) bool {
	var typeName, format string
	if len(s.Type) == 1 {
		switch s.Type[0] {
		case "integer":
			typeName = "integer"
			if s.Format == "int32" || s.Format == "int64" {
				format = s.Format
			}
		case "number":
			typeName = "number"
			if s.Format == "float" || s.Format == "double" {
				format = s.Format
			}
		}
	}
	if validate.IsValueValidAgainstRange(data, typeName, format, "Checked", "") != nil {
		return false
	}
	if s.MultipleOf != nil {
		if validate.IsValueValidAgainstRange(*s.MultipleOf, typeName, format, "MultipleOf", "") != nil || validate.MultipleOfNativeType("", "", data, *s.MultipleOf) != nil {
			return false
		}
	}
	if s.Maximum != nil {
		if validate.IsValueValidAgainstRange(*s.Maximum, typeName, format, "Maximum boundary", "") != nil || validate.MaximumNativeType("", "", data, *s.Maximum, s.ExclusiveMaximum) != nil {
			return false
		}
	}
	if s.Minimum != nil {
		if validate.IsValueValidAgainstRange(*s.Minimum, typeName, format, "Minimum boundary", "") != nil || validate.MinimumNativeType("", "", data, *s.Minimum, s.ExclusiveMinimum) != nil {
			return false
		}
	}
	return true
}

// sliceAccepts is kube-openapi's schemaSliceValidator.Validate for a
// single items schema.
func (c *openAPIChecker) sliceAccepts(data []any) bool {
	s := c.s
	if c.items != nil {
		for _, item := range data {
			if !c.items.accepts(item) {
				return false
			}
		}
	}
	size := int64(len(data))
	if s.MinItems != nil && validate.MinItems("", "", size, *s.MinItems) != nil {
		return false
	}
	if s.MaxItems != nil && validate.MaxItems("", "", size, *s.MaxItems) != nil {
		return false
	}
	if s.UniqueItems && validate.UniqueItems("", "", data) != nil {
		return false
	}
	return true
}

// objectAccepts is kube-openapi's objectValidator.Validate without
// patternProperties.
func (c *openAPIChecker) objectAccepts(data map[string]any) bool {
	s := c.s
	n := int64(len(data))
	if s.MinProperties != nil && n < *s.MinProperties {
		return false
	}
	if s.MaxProperties != nil && n > *s.MaxProperties {
		return false
	}
	for key, value := range data {
		if property, regular := c.properties[key]; regular {
			if !property.accepts(value) {
				return false
			}
			continue
		}
		switch {
		case s.AdditionalProperties != nil && !s.AdditionalProperties.Allows:
			return false
		case c.additional != nil:
			if !c.additional.accepts(value) {
				return false
			}
		}
	}
	for _, name := range s.Required {
		if _, ok := data[name]; !ok {
			return false
		}
	}
	return true
}
