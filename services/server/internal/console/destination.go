package console

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/broker"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/kinds"
)

// brokerKinds are the broker destination kinds the form offers, by name;
// their fields are the registry's (outbound.Driver.Fields), the API's own.
var brokerKinds = func() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(kinds.All)) {
		if k != outbound.KindHTTP {
			out = append(out, k)
		}
	}
	return out
}()

// destinationFields are the names the API gives a destination's fields in
// a problem's detail ("destination.exchange: ..."), the specific before
// the whole, for fieldOf.
var destinationFields = func() []string {
	names := map[string]bool{}
	for _, k := range brokerKinds {
		for _, f := range kinds.All[k].Fields {
			names["destination."+f.Name] = true
		}
	}
	return append(append(slices.Sorted(maps.Keys(names)), "destination.kind"), "destination")
}()

// examples are the placeholders of the kinds' fields: how a value looks,
// never what is valid (the kind's ParseConfig says that).
var examples = map[string]string{
	"rabbitmq.url": "amqp://user:password@host:5672/vhost", "rabbitmq.exchange": "events",
	"rabbitmq.routing_key": "{space}.{type} (default)",
	"jetstream.url":        "nats://user:password@host:4222", "jetstream.subject": "bothy.{space}.{type}",
	"jetstream.stream": "any stream that takes the subject",
	"redis.url":        "redis://user:password@host:6379/0", "redis.key": "bothy:{space}", "redis.maxlen": "no trimming",
	"mqtt.url": "mqtt://user:password@host:1883", "mqtt.topic": "bothy/{space}/{type}",
}

// kindForm is one destination kind's fieldset in the form.
type kindForm struct {
	Name   string
	Fields []kindField
}

// kindField is one of a kind's fields in the form; its input is named
// KIND.NAME, so each kind keeps what was typed into it.
type kindField struct {
	outbound.Field
	Input, Value, Error, Example string
}

// Kinds are the broker kinds' fieldsets with their values; a field's
// error is shown only in the chosen kind's.
func (f *subscriptionForm) Kinds() []kindForm {
	out := make([]kindForm, 0, len(brokerKinds))
	for _, k := range brokerKinds {
		kf := kindForm{Name: k}
		for _, fd := range kinds.All[k].Fields {
			in := k + "." + fd.Name
			field := kindField{Field: fd, Input: in, Value: f.Values[in], Example: examples[in]}
			if f.Values["kind"] == k {
				field.Error = f.Errors["destination."+fd.Name]
			}
			kf.Fields = append(kf.Fields, field)
		}
		out = append(out, kf)
	}
	return out
}

// KindNames are the kinds the form's selector offers, http first.
func (f *subscriptionForm) KindNames() []string {
	return append([]string{outbound.KindHTTP}, brokerKinds...)
}

// setDestination fills the form's values from a subscription's
// destination as the API shows it (credentials masked).
func (f *subscriptionForm) setDestination(sub *subscriptionView) {
	kind := sub.DestinationKind()
	f.Values["kind"] = kind
	d, ok := kinds.All[kind]
	if !ok || kind == outbound.KindHTTP {
		return
	}
	for _, fd := range d.Fields {
		if v, ok := sub.Destination[fd.Name]; ok && v != nil {
			f.Values[kind+"."+fd.Name] = fmt.Sprint(v)
		}
	}
}

// readDestination takes the posted kind and its fields into f and sets the
// API's destination in body. A broker kind's fields go as typed: a url
// whose credential is still the mask keeps the stored credential (the API
// puts it back), a new one rotates it. An edit that posts none of the
// kind's fields (an older form) leaves the destination as it is.
func (f *subscriptionForm) readDestination(r *http.Request, body map[string]any) {
	kind := strings.TrimSpace(r.PostFormValue("kind"))
	chosen := kind != ""
	if !chosen {
		kind = outbound.KindHTTP
		if f.Sub != nil {
			kind = f.Sub.DestinationKind()
		}
	}
	f.Values["kind"] = kind
	d, known := kinds.All[kind]
	for _, k := range brokerKinds {
		for _, fd := range kinds.All[k].Fields {
			f.Values[k+"."+fd.Name] = strings.TrimSpace(r.PostFormValue(k + "." + fd.Name))
		}
	}
	if kind == outbound.KindHTTP {
		if f.Sub == nil || chosen || f.Sub.URL != "" || f.Values["url"] != "" {
			body["url"] = f.Values["url"] // a broker's edit from an older form leaves url empty: the destination stays
		}
		return
	}
	dest := map[string]any{"kind": kind}
	posted := false
	for _, fd := range d.Fields {
		in := kind + "." + fd.Name
		_, sent := r.PostForm[in]
		posted = posted || sent
		v := f.Values[in]
		switch {
		case v == "" && fd.Optional:
		case fd.Number:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				f.Errors["destination."+fd.Name] = "destination." + fd.Name + ": want a whole number"
				continue
			}
			dest[fd.Name] = n
		default:
			dest[fd.Name] = v
		}
	}
	if !known || posted || f.Sub == nil {
		body["destination"] = dest // an unknown kind goes too: the API names it
	}
}

// maskCredentials replaces, in the values the form shows again, every
// credential that was typed with the mask: a refused form never echoes a
// credential into the page. It is masked as the kind masks it when the
// kind takes the fields, otherwise the URL's user information is masked.
func (f *subscriptionForm) maskCredentials() {
	for _, k := range brokerKinds {
		fields := map[string]any{}
		for _, fd := range kinds.All[k].Fields {
			if v := f.Values[k+"."+fd.Name]; v != "" {
				fields[fd.Name] = v
				if fd.Number {
					fields[fd.Name], _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
		var shown map[string]any
		if raw, err := json.Marshal(fields); err == nil {
			if c, err := kinds.All.Check(k, raw); err == nil {
				_ = json.Unmarshal(c.Redacted, &shown)
			}
		}
		for _, fd := range kinds.All[k].Fields {
			in := k + "." + fd.Name
			v := f.Values[in]
			if !fd.Credential || v == "" || strings.Contains(v, outbound.Masked) {
				continue
			}
			if s, ok := shown[fd.Name].(string); ok {
				f.Values[in] = s
			} else {
				f.Values[in] = broker.RedactURL(v, true)
			}
			if f.Values[in] != v {
				f.Retype = true
			}
		}
	}
}

// shownAt is the key of f.Errors under which the form shows a problem
// about field (as fieldOf names it): a destination's field by that field
// of the chosen kind (an http destination's url by the url field), the
// destination as a whole by the kind selector, and a field the form does
// not show as the form's error.
func (f *subscriptionForm) shownAt(field string) string {
	name, ok := strings.CutPrefix(field, "destination.")
	switch {
	case field == "destination" || field == "destination.kind":
		return "kind"
	case !ok:
		return field
	case f.Values["kind"] == outbound.KindHTTP && name == "url":
		return "url"
	}
	for _, fd := range kinds.All[f.Values["kind"]].Fields {
		if fd.Name == name {
			return field
		}
	}
	return ""
}
