package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// pageSizes are the page sizes a list offers; the first is the default.
var pageSizes = []int{20, 10, 50, 100}

// maxBack bounds the cursors of earlier pages a list's URL carries, so a
// long walk does not grow the URL without end; past them, "First page"
// still leads back.
const maxBack = 50

// pager pages a list by the API's cursors, which only go forward: the URL
// carries the cursors of the pages before this one (back, oldest first;
// "" is the first page), so "Previous" is the last of them.
type pager struct {
	Path   string
	Limit  int
	Cursor string
	Back   []string
	// Next is the API's next_cursor, "" on the last page.
	Next string
	// base is the list's filter, kept by every link.
	base url.Values
}

func readPager(r *http.Request) pager {
	q := r.URL.Query()
	p := pager{Path: r.URL.Path, Limit: pageSizes[0], Cursor: q.Get("cursor"), Back: q["back"]}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && slices.Contains(pageSizes, n) {
		p.Limit = n
	}
	if len(p.Back) > maxBack {
		p.Back = p.Back[len(p.Back)-maxBack:]
	}
	return p
}

// Sizes lists the page sizes, for the page-size choice.
func (p pager) Sizes() []int { return pageSizes }

func (p pager) href(cursor string, back []string) string {
	q := url.Values{}
	for k, v := range p.base {
		q[k] = v
	}
	if p.Limit != pageSizes[0] {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if len(back) > 0 {
		q["back"] = back
	}
	if len(q) == 0 {
		return p.Path
	}
	return p.Path + "?" + q.Encode()
}

// NextURL is the next page, "" on the last.
func (p pager) NextURL() string {
	if p.Next == "" {
		return ""
	}
	return p.href(p.Next, append(slices.Clone(p.Back), p.Cursor))
}

// PrevURL is the page before this one, "" on the first.
func (p pager) PrevURL() string {
	if p.Cursor == "" {
		return ""
	}
	if len(p.Back) == 0 {
		return p.FirstURL()
	}
	return p.href(p.Back[len(p.Back)-1], p.Back[:len(p.Back)-1])
}

// FirstURL is the list's first page with the same filter.
func (p pager) FirstURL() string { return p.href("", nil) }

// deliveryFilter is the deliveries list's filter as typed: the status, an
// event's ID, an event type pattern, and a range of creation times
// (datetime-local inputs, read as UTC).
type deliveryFilter struct {
	Status, EventID, Type, Since, Until string
}

// localTime is the value format of an <input type="datetime-local">.
const localTime = "2006-01-02T15:04"

func readDeliveryFilter(r *http.Request) deliveryFilter {
	q := r.URL.Query()
	return deliveryFilter{Status: q.Get("status"), EventID: q.Get("event_id"), Type: q.Get("type"), Since: q.Get("since"),
		Until: q.Get("until")}
}

// query is the filter as the page's URL carries it.
func (f deliveryFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "event_id": f.EventID, "type": f.Type, "since": f.Since,
		"until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// apiQuery is the filter as the API takes it: times in RFC 3339 (UTC). A
// time the console cannot read is passed on as it is, for the API to
// refuse naming the parameter.
func (f deliveryFilter) apiQuery() url.Values {
	q := f.query()
	for _, k := range []string{"since", "until"} {
		if t, err := time.Parse(localTime, q.Get(k)); err == nil {
			q.Set(k, t.UTC().Format(time.RFC3339))
		}
	}
	return q
}

// Empty says whether the filter shows every delivery.
func (f deliveryFilter) Empty() bool { return f == deliveryFilter{} }
