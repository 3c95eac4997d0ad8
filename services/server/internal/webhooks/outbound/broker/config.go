package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// FieldError is a destination configuration's refusal: Field is the JSON
// field's path ("destination.subject"), Reason what is wrong with it. Its
// text never carries a credential.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Fieldf returns a *FieldError for the destination's JSON field name.
func Fieldf(name, format string, args ...any) error {
	return &FieldError{Field: fieldPath(name), Reason: fmt.Sprintf(format, args...)}
}

func fieldPath(name string) string {
	if name == "" {
		return "destination"
	}
	return "destination." + name
}

// Decode reads raw, a JSON object, into v (a pointer to a struct with
// json tags) and refuses unknown fields, values of the wrong type and
// anything after the object, each as a *FieldError naming the field. It
// never echoes a value, which could be a credential.
func Decode(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return Fieldf("", "missing: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() {
			return Fieldf("", "want one JSON object, found more after it")
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return Fieldf("", "want a JSON object, not %s", te.Value)
		}
		return Fieldf(te.Field, "want %s, not %s", jsonKind(te.Type.Kind().String()), te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return Fieldf(strings.Trim(name, `"`), "unknown field")
	}
	return Fieldf("", "not a JSON object")
}

// jsonKind names a Go kind as the JSON type that decodes into it.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	}
	return "a " + k
}
