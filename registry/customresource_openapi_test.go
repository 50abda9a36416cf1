package registry

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// openAPIZoo has a property for every keyword openAPIAccepts follows, in
// the forms CRDs use them, and a few it leaves to kube's validator.
const openAPIZoo = `
type: object
required: [req]
maxProperties: 12
properties:
  req: {type: string}
  str: {type: string, minLength: 2, maxLength: 5, pattern: "^[a-z]+$"}
  enumStr: {type: string, enum: [a, b]}
  enumInt: {type: integer, enum: [1, 2]}
  nullable: {type: string, nullable: true}
  int: {type: integer, minimum: -3, maximum: 3, exclusiveMaximum: true, multipleOf: 1}
  int32: {type: integer, format: int32}
  int64: {type: integer, format: int64}
  num: {type: number, minimum: 0.5, exclusiveMinimum: true, maximum: 10, multipleOf: 0.5}
  float: {type: number, format: float}
  double: {type: number, format: double}
  bool: {type: boolean}
  date: {type: string, format: date-time}
  uuid: {type: string, format: uuid}
  byte: {type: string, format: byte}
  ios: {x-kubernetes-int-or-string: true}
  list: {type: array, minItems: 1, maxItems: 3, items: {type: integer, minimum: 0}}
  unique: {type: array, uniqueItems: true, items: {type: integer}}
  map: {type: object, minProperties: 1, additionalProperties: {type: string, maxLength: 3}}
  closed: {type: object, properties: {a: {type: string}}, additionalProperties: false}
  nested:
    type: object
    required: [x]
    properties:
      x:
        type: array
        items: {type: object, required: [k], properties: {k: {type: string}, v: {type: integer}}}
  free: {type: object, x-kubernetes-preserve-unknown-fields: true}
  any: {x-kubernetes-preserve-unknown-fields: true}
  allOf: {type: string, allOf: [{minLength: 1}]}
  not: {type: integer, not: {enum: [0]}}
  iosPattern: {x-kubernetes-int-or-string: true, anyOf: [{type: integer}, {type: string, pattern: "^[0-9]+%$"}]}
`

// unfollowed are the zoo's properties openAPIAccepts leaves to kube.
var unfollowed = map[string]bool{"allOf": true, "not": true, "iosPattern": true}

func openAPIValues() []any {
	m := func(kv ...any) map[string]any {
		out := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	return []any{
		nil, true, false,
		"", "a", "b", "ab", "abc", "ABC", "abcdef", "50%", "7", "2020-01-01T00:00:00Z", "not-a-date",
		"8d6f3a8e-5c1e-4c31-9f7e-3c3c9a4f1b2e", "aGVsbG8=", "!!", "\x01",
		int64(0), int64(1), int64(2), int64(-3), int64(3), int64(5), int64(97),
		int64(2147483647), int64(2147483648), int64(-2147483649), int64(9007199254740993),
		0.5, 1.0, 1.5, 2.25, 10.0, 10.5, -0.0, 1e40, 3.4e39, 2147483648.0,
		[]any{}, []any{int64(1)}, []any{int64(1), int64(2), int64(3), int64(4)}, []any{int64(-1)}, []any{int64(1), int64(1)}, []any{1.0, int64(1)}, []any{"a"}, []any{nil},
		m(), m("a", "x"), m("a", int64(1)), m("b", "x"), m("a", "xyzw"), m("a", nil),
		m("x", []any{m("k", "a")}), m("x", []any{m("v", int64(1))}), m("x", []any{m("k", "a", "v", 1.5)}), m("x", "y"),
	}
}

// TestOpenAPIAcceptsAgreesWithKube: for random objects against the zoo,
// openAPIAccepts never accepts what kube-openapi's validator refuses, and
// accepts all it accepts unless the object uses a keyword openAPIAccepts
// leaves to it.
func TestOpenAPIAcceptsAgreesWithKube(t *testing.T) {
	v1 := &apiextensionsv1.JSONSchemaProps{}
	if err := yaml.Unmarshal([]byte(openAPIZoo), v1); err != nil {
		t.Fatal(err)
	}
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v1, internal, nil); err != nil {
		t.Fatal(err)
	}
	validator, schema, err := apiservervalidation.NewSchemaValidator(internal)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range internal.Properties {
		names = append(names, name)
	}
	values := openAPIValues()
	rnd := rand.New(rand.NewPCG(1, 2))
	accepted, refused := 0, 0
	for range 20000 {
		obj := map[string]any{}
		if rnd.IntN(8) != 0 {
			obj["req"] = "r"
		}
		follows := true
		for range rnd.IntN(4) + 1 {
			name := names[rnd.IntN(len(names))]
			obj[name] = values[rnd.IntN(len(values))]
			follows = follows && !unfollowed[name]
		}
		if rnd.IntN(10) == 0 {
			obj["unknown"] = "u"
		}
		fast := openAPIAccepts(schema, obj)
		kube := validator.Validate(obj).IsValid()
		if fast && !kube {
			js, _ := json.Marshal(obj)
			t.Fatalf("openAPIAccepts(%s) = true; kube refuses it: %v", js, validator.Validate(obj).Errors)
		}
		if follows && fast != kube {
			js, _ := json.Marshal(obj)
			t.Errorf("openAPIAccepts(%s) = %t; kube's validator says %t", js, fast, kube)
		}
		if kube {
			accepted++
		} else {
			refused++
		}
	}
	if accepted < 1000 || refused < 1000 {
		t.Errorf("%d objects accepted, %d refused: the test does not exercise both", accepted, refused)
	}
}

// TestEqualJSON: equalJSON is apiequality.Semantic.DeepEqual for decoded
// JSON values.
func TestEqualJSON(t *testing.T) {
	values := append(openAPIValues(), map[string]any(nil), []any(nil), map[string]any{"a": []any(nil)}, map[string]any{"a": []any{}})
	for _, a := range values {
		for _, b := range values {
			if got, want := equalJSON(a, b), apiequality.Semantic.DeepEqual(a, b); got != want {
				t.Errorf("equalJSON(%#v, %#v) = %t; Semantic.DeepEqual says %t", a, b, got, want)
			}
		}
	}
	if !equalExceptMetadata(map[string]any{"metadata": 1, "spec": map[string]any{}}, map[string]any{"spec": map[string]any(nil)}) ||
		equalExceptMetadata(map[string]any{"spec": 1}, map[string]any{"spec": 1, "status": 2}) {
		t.Errorf("equalExceptMetadata compares more or less than all but metadata")
	}
}
