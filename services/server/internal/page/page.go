// Package page is the cursor of keyset pagination, shared by the HTTP API
// and the CLI so that both hand out and take the same cursors.
//
// A list is read in a fixed order of a unique key (created_at and id, or a
// seq), and a page's cursor is the key of its last item: the next page is
// what comes after that key. Unlike an offset, the cursor does not move when
// items are added or deleted before it, so a walk sees every item that
// existed when it started exactly once (TestAPI_PaginationWalksEveryItemOnce).
// Cursors are opaque to clients: base64url of a small JSON object that names
// its list, so a cursor of one list is refused by another.
package page

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Page sizes of every list.
const (
	// DefaultLimit is the page size when none is asked for.
	DefaultLimit = 50
	// MaxLimit is the largest page size.
	MaxLimit = 500
)

// ErrBadCursor is returned by Decode for a cursor that is not one of the
// list's.
var ErrBadCursor = errors.New("not a cursor of this list: pass next_cursor of the previous page as it is")

// Key is the sort key of a page's last item. Lists ordered by time set Time
// and ID, lists ordered by seq set Seq, lists ordered by a name (principals,
// members) set Name, lists ordered by a UUIDv7 set ID.
type Key struct {
	// List names the list the cursor belongs to.
	List string    `json:"l"`
	Time time.Time `json:"t,omitzero"`
	ID   uuid.UUID `json:"i,omitzero"`
	Seq  int64     `json:"s,omitempty"`
	Name string    `json:"n,omitempty"`
}

// Encode returns the cursor for k.
func (k Key) Encode() string {
	raw, _ := json.Marshal(k) // a Key always marshals
	return base64.RawURLEncoding.EncodeToString(raw)
}

// Decode reads a cursor of list. "" is the first page: the zero Key.
func Decode(list, cursor string) (Key, error) {
	if cursor == "" {
		return Key{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(raw) > 512 {
		return Key{}, ErrBadCursor
	}
	var k Key
	if err := json.Unmarshal(raw, &k); err != nil || k.List != list {
		return Key{}, ErrBadCursor
	}
	if strings.ContainsRune(k.Name, 0) { // no name holds one, and PostgreSQL's text cannot
		return Key{}, ErrBadCursor
	}
	return k, nil
}

// Limit parses a page size: "" is DefaultLimit, otherwise 1..MaxLimit.
func Limit(v string) (int, error) {
	if v == "" {
		return DefaultLimit, nil
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || fmt.Sprint(n) != v || n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("limit %q: want 1..%d", v, MaxLimit)
	}
	return n, nil
}
