package eventpull

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// client calls the API as the run's reader.
type client struct {
	base, token string
	http        *http.Client
}

// envelope is what the run reads of an event.
type envelope struct {
	ID  string `json:"id"`
	Seq int64  `json:"seq"`
}

// page is an answer of GET /v1/spaces/{space}/events.
type page struct {
	Events     []envelope `json:"events"`
	NextCursor string     `json:"next_cursor"`
	Done       bool       `json:"done"`
}

// events GETs a page of space's events with query.
func (c *client) events(ctx context.Context, space string, query url.Values) (*page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/spaces/"+space+"/events?"+query.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s events: %s: %s", space, res.Status, body)
	}
	var p page
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("GET %s events: %w", space, err)
	}
	return &p, nil
}
