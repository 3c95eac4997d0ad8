package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/config"
)

// remoteFlags are --server and --token, which every command accepts (those
// the API cannot serve refuse --server), and the environment they fall back
// to.
type remoteFlags struct {
	server, token string
	environ       []string
}

// remoteAnnotation marks the commands that run through the HTTP API when a
// server is named.
const remoteAnnotation = "bothy-remote"

func addRemoteFlags(fs *pflag.FlagSet, e *env) *remoteFlags {
	r := &remoteFlags{environ: e.environ}
	fs.StringVar(&r.server, "server", "", "base URL of a bothy server to run the command through its HTTP API (default $BOTHY_SERVER)")
	fs.StringVar(&r.token, "token", "", "bearer token for --server (default $BOTHY_TOKEN, then the one \"bothy login\" saved); "+
		"prefer those two: a flag shows in the process list")
	return r
}

// serverURL returns the server the command runs through, "" for none:
// --server, else $BOTHY_SERVER.
func (r *remoteFlags) serverURL() string {
	if r.server != "" {
		return r.server
	}
	return lookupEnv(r.environ, config.EnvServer)
}

// client returns the API client when a server is named, nil when the
// command works on the database.
func (r *remoteFlags) client() (*apiClient, error) {
	raw := r.serverURL()
	if raw == "" {
		return nil, nil
	}
	base, err := normalizeServer(raw)
	if err != nil {
		return nil, err
	}
	token := r.token
	if token == "" {
		token = lookupEnv(r.environ, config.EnvToken)
	}
	if token == "" {
		creds, err := loadCredentials(r.environ)
		if err != nil {
			return nil, err
		}
		token = creds.Servers[base].Token
	}
	if token == "" {
		return nil, fmt.Errorf("no token for %s: pass --token, set BOTHY_TOKEN or run \"bothy login --server %s\"", base, base)
	}
	return newAPIClient(base, token), nil
}

// normalizeServer checks a server's base URL and returns it without a
// trailing slash, the form credentials are saved under.
func normalizeServer(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%w: server %q: want a base URL such as https://bothy.example.com", errUsage, raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// apiClient calls the bothy HTTP API with a bearer token. It is safe for
// concurrent use.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

func newAPIClient(base, token string) *apiClient {
	return &apiClient{base: base, token: token, http: &http.Client{Timeout: 2 * time.Minute}}
}

// apiError is a problem document (RFC 9457) the server answered.
type apiError struct {
	Status int    `json:"status"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", cmp.Or(e.Detail, e.Title, http.StatusText(e.Status)), e.Status)
}

// do sends body (if not nil) as JSON with method to path and query, and
// decodes a 2xx answer into out (if not nil). Any other answer is an
// *apiError.
func (a *apiClient) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	_, err := a.doStatus(ctx, method, path, query, body, out)
	return err
}

// doStatus is do that also returns the answer's status code.
func (a *apiClient) doStatus(ctx context.Context, method, path string, query url.Values, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(raw)
	}
	u := a.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.http.Do(req)
	if err != nil {
		return 0, err // names the method and the URL
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return res.StatusCode, fmt.Errorf("%s %s: read the answer: %w", method, a.base+path, err)
	}
	if res.StatusCode/100 != 2 {
		p := &apiError{Status: res.StatusCode}
		if json.Unmarshal(raw, p) != nil || p.Status == 0 {
			p = &apiError{Status: res.StatusCode, Detail: strings.TrimSpace(string(raw[:min(len(raw), 300)]))}
		}
		return res.StatusCode, p
	}
	if out == nil || len(raw) == 0 {
		return res.StatusCode, nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return res.StatusCode, fmt.Errorf("%s %s: the answer is not what this CLI expects (an older or newer server?): %w", method, a.base+path, err)
	}
	return res.StatusCode, nil
}
