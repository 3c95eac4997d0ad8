package broker

import (
	"strings"
	"unicode/utf8"
)

// MaxTemplateLength is the longest subject, key or topic template, in
// bytes.
const MaxTemplateLength = 255

// Placeholders a template may use: the message's first event's space and
// type.
const (
	SpacePlaceholder = "{space}"
	TypePlaceholder  = "{type}"
)

// Template is a subject, key or topic with placeholders for the message's
// space and type. Its zero value renders "".
type Template struct {
	// parts alternate literal text and placeholders.
	parts []part
}

type part struct {
	lit  string
	kind byte // 0 literal, 's' space, 't' type
}

// ParseTemplate parses raw, the destination's JSON field name: at most
// MaxTemplateLength bytes of UTF-8 without control characters, literal
// text and {space} and {type}; any other brace is refused. check, when not
// nil, judges what the template renders for a sample space and type
// ("space" and "type"), and returns why it would not do for this broker.
func ParseTemplate(name, raw string, check func(rendered string) string) (Template, error) {
	switch {
	case raw == "":
		return Template{}, Fieldf(name, "missing")
	case len(raw) > MaxTemplateLength:
		return Template{}, Fieldf(name, "%d bytes, at most %d", len(raw), MaxTemplateLength)
	case !utf8.ValidString(raw):
		return Template{}, Fieldf(name, "not valid UTF-8")
	}
	for _, r := range raw {
		if r < 0x20 || r == 0x7f {
			return Template{}, Fieldf(name, "control characters are not allowed")
		}
	}
	var t Template
	for rest := raw; rest != ""; {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			t.parts = append(t.parts, part{lit: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, part{lit: rest[:i]})
			rest = rest[i:]
		}
		switch {
		case strings.HasPrefix(rest, SpacePlaceholder):
			t.parts = append(t.parts, part{kind: 's'})
			rest = rest[len(SpacePlaceholder):]
		case strings.HasPrefix(rest, TypePlaceholder):
			t.parts = append(t.parts, part{kind: 't'})
			rest = rest[len(TypePlaceholder):]
		default:
			return Template{}, Fieldf(name, "unexpected %q at byte %d: the placeholders are {space} and {type}", rest[:1], len(raw)-len(rest))
		}
	}
	if check != nil {
		if why := check(t.Render("space", "type")); why != "" {
			return Template{}, Fieldf(name, "%s", why)
		}
	}
	return t, nil
}

// Render is the template with space and typ in place of the placeholders.
func (t Template) Render(space, typ string) string {
	if len(t.parts) == 1 && t.parts[0].kind == 0 {
		return t.parts[0].lit
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case 's':
			b.WriteString(space)
		case 't':
			b.WriteString(typ)
		default:
			b.WriteString(p.lit)
		}
	}
	return b.String()
}
