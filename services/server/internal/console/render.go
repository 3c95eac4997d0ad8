package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
)

// pageNames are the templates of templates/, one page each; every page
// fills the blocks of layout.html.
var pageNames = []string{"error", "sign-in", "subscriptions", "subscription", "subscription-form", "delivery", "confirm", "result", "lag", "push", "portal-confirm",
	"portal-continue"}

type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	// rfc3339 and utc render a time (time.Time or *time.Time) for the
	// "time" block: machine-readable in datetime, UTC as text, which
	// static/time.js turns into the viewer's locale.
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"utc":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"deref": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
	"ms":  func(s float64) string { return fmt.Sprintf("%.0f ms", s*1000) },
	"url": breakableURL,
	// percent renders a share (0..1) as a percentage, "–" for none.
	"percent": func(r *float64) string {
		if r == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", *r*100)
	},
}

// breakableURL renders u as text that a narrow screen wraps where a
// reader expects a URL to wrap: after a slash (not inside "//") or a
// hyphen, before a dot, "?", "&" or "#". A browser finds no such
// place in a URL on its own and, told it may break anywhere, cuts a word
// in two.
func breakableURL(u string) template.HTML {
	var b strings.Builder
	for i, r := range u {
		if i > 0 && strings.ContainsRune(".?&#", r) {
			b.WriteString("<wbr>")
		}
		b.WriteString(template.HTMLEscapeString(string(r)))
		if r == '-' || r == '/' && (i+1 >= len(u) || u[i+1] != '/') {
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String()) //nolint:gosec // every character of u is escaped
}

func parsePages() (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// layoutData is what layout.html reads; Page is the page's own data.
type layoutData struct {
	Title     string
	Principal string
	// Portal is the space of a portal session, "" otherwise.
	Portal string
	CSRF   string
	Page   any
}

// render writes page with status; s is nil on pages without a session.
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, status int, name string, data any) {
	d := layoutData{Title: titles[name], Page: data}
	if s != nil {
		d.Principal, d.Portal, d.CSRF = s.subject.Principal, s.portalSpace, s.csrfToken()
	}
	var buf bytes.Buffer
	if err := c.pages.byName[name].Execute(&buf, &d); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: render "+name, "error", err)
		http.Error(w, "internal error; the server log has the cause", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

var titles = map[string]string{
	"error": "Error", "sign-in": "Sign in", "subscriptions": "Webhook subscriptions", "subscription": "Webhook subscription",
	"subscription-form": "Webhook subscription", "delivery": "Delivery",
	"confirm": "Confirm", "result": "Done", "lag": "Delivery lag", "push": "Push registrations",
	"portal-confirm": "Open the portal", "portal-continue": "Open the portal",
}
