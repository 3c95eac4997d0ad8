package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	gosync "sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"
)

// This file holds every answer the tests get from the API to
// openapi/bothy.json. TestMain (validateAgainstOpenAPI) puts
// validatingTransport under http.DefaultClient, which send (and so every
// testBundle.do) uses, so each request of each test is checked on its way
// back, whatever endpoint it is for: the operations are read from the
// document, so an endpoint added later is covered by its first test, and
// one missing from the document fails it. A mismatch is the request's
// error, which the test's require.NoError reports with the reason.
//
// What is checked, for a request under /v1/:
//   - a documented operation: the response's status is one the operation
//     documents (no "default"), its Content-Type one documented for that
//     status, its body valid against that schema, with no field the schema
//     does not name (see closeResponseObjects), its documented headers
//     present, and no body where none is documented. A request the document
//     refuses (parameters, body, Content-Type, a missing bearer token) must
//     be answered 4xx: the server may refuse more than the document says,
//     never accept what it refuses.
//   - a path the document does not have: a 404 problem; a method it does not
//     have on a documented path: a 405 problem with Allow.
//
// Outside /v1/ (River UI, /metrics) only problem documents are checked.
// Every problem document must match components/schemas/Problem and carry
// the response's status.

// validateAgainstOpenAPI puts validatingTransport under http.DefaultClient
// and returns m, which, once every test of the package ran and passed
// (no -run, -skip or -short), fails the package if a documented operation
// got no request from any test: every operation's answers are checked,
// so a new endpoint needs a test here as well as its entry in the
// document.
func validateAgainstOpenAPI(m *testing.M) interface{ Run() int } {
	http.DefaultClient.Transport = &validatingTransport{next: http.DefaultTransport, exercised: &exercised}
	return coverageM{m}
}

type coverageM struct{ m *testing.M }

func (c coverageM) Run() int {
	code := c.m.Run()
	if code != 0 || testing.Short() || flag.Lookup("test.run").Value.String() != "" || flag.Lookup("test.skip").Value.String() != "" {
		return code
	}
	spec, err := loadAPISpec()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var missing []string
	for _, op := range spec.operations {
		if _, ok := exercised.Load(op); !ok {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: no test of this package sent a request to these operations of openapi/bothy.json, so their answers went unchecked: %s\n",
			strings.Join(missing, ", "))
		return 1
	}
	return code
}

// exercised holds the "METHOD /path" of every documented operation a test
// sent a request to with http.DefaultClient.
var exercised gosync.Map

// apiSpec is openapi/bothy.json loaded for validation.
type apiSpec struct {
	// operations are the documented "METHOD /path" of the document.
	operations []string
	doc        *openapi3.T
	router     routers.Router
	problem    *openapi3.Schema
	options    *openapi3filter.Options
}

var loadAPISpec = gosync.OnceValues(func() (*apiSpec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("openapi/bothy.json")
	if err != nil {
		return nil, fmt.Errorf("load openapi/bothy.json: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi/bothy.json is not a valid OpenAPI document: %w", err)
	}
	closeResponseObjects(doc)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi/bothy.json: router: %w", err)
	}
	problem := doc.Components.Schemas["Problem"]
	if problem == nil || problem.Value == nil {
		return nil, errors.New("openapi/bothy.json: no components/schemas/Problem")
	}
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return &apiSpec{
		operations: ops,
		doc:        doc,
		router:     router,
		problem:    problem.Value,
		options: &openapi3filter.Options{
			IncludeResponseStatus:   true,
			MultiError:              true,
			SkipSettingDefaults:     true,
			AuthenticationFunc:      bearerPresent,
			SchemaValidationOptions: schemaOptions,
		},
	}, nil
})

// schemaOptions are the options of every schema check: the formats the
// document uses that kin-openapi leaves unchecked, and short messages (the
// response body is printed with them).
var schemaOptions = []openapi3.SchemaValidationOption{
	openapi3.WithStringFormatValidator("uuid", openapi3.NewRegexpFormatValidator(openapi3.FormatOfStringForUUIDOfRFC9562)),
	openapi3.WithStringFormatValidator("uri", absoluteURI{}),
	openapi3.SetSchemaErrorMessageCustomizer(func(err *openapi3.SchemaError) string {
		if strings.HasSuffix(err.Reason, "false schema") {
			return err.Reason + " (a field the document does not name)"
		}
		return err.Reason
	}),
}

// closeResponseObjects makes the tests stricter than the published
// contract: every object schema of a response that lists its properties
// and says nothing about others gets unevaluatedProperties false, so a
// field the server sends and the document does not name fails. The file
// itself leaves them open, so clients tolerate fields added later. Members
// of an allOf stay open (their parent is closed, which sees their
// properties); free-form objects (no properties, like an event's data)
// stay free.
func closeResponseObjects(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	allOfMember := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, m := range s.AllOf {
			if m != nil && m.Value != nil {
				allOfMember[m.Value] = true
			}
			walk(m)
		}
		for _, m := range append(s.OneOf, s.AnyOf...) {
			walk(m)
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, res := range op.Responses.Map() {
				if res.Value == nil {
					continue
				}
				for _, mt := range res.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
	for s := range seen {
		open := s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil &&
			s.UnevaluatedProperties.Has == nil && s.UnevaluatedProperties.Schema == nil
		if open && !allOfMember[s] && (len(s.Properties) > 0 || len(s.AllOf) > 0) {
			s.UnevaluatedProperties = openapi3.BoolSchema{Has: openapi3.Ptr(false)}
		}
	}
}

// bearerPresent is the document's security check as a client sees it: a
// bearer token is sent. Whether the server accepts it is the server's
// business (401, documented).
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	ss := in.SecurityScheme
	if ss == nil || ss.Type != "http" || !strings.EqualFold(ss.Scheme, "bearer") {
		return in.NewError(fmt.Errorf("security scheme %q: the validator knows only http bearer", in.SecuritySchemeName))
	}
	scheme, cred, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(cred) == "" {
		return in.NewError(errors.New("no Authorization: Bearer <token>"))
	}
	return nil
}

// absoluteURI is JSON Schema's "uri" format: an absolute URI.
type absoluteURI struct{}

func (absoluteURI) Validate(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if !u.IsAbs() {
		return fmt.Errorf("%q is not an absolute URI", s)
	}
	return nil
}

// validatingTransport sends requests with next and fails those whose
// exchange disagrees with openapi/bothy.json (see the top of this file).
type validatingTransport struct {
	next http.RoundTripper
	// exercised, if set, takes the documented operations requested.
	exercised *gosync.Map
}

func (vt *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	spec, err := loadAPISpec()
	if err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	var reqBody []byte
	if req.Body != nil {
		reqBody, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	out := req.Clone(req.Context())
	if req.Body != nil {
		out.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	res, err := vt.next.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	resBody, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(resBody))
	operation, err := spec.check(req, reqBody, res, resBody)
	if operation != "" && vt.exercised != nil {
		vt.exercised.Store(operation, true)
	}
	if err != nil {
		return nil, fmt.Errorf("openapi/bothy.json disagrees with %s %s -> %d %s: %w\nresponse body: %s",
			req.Method, req.URL.RequestURI(), res.StatusCode, res.Header.Get("Content-Type"), err, excerpt(resBody))
	}
	return res, nil
}

func excerpt(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// check holds one exchange to the document and returns the documented
// operation it is for ("" if none).
func (s *apiSpec) check(req *http.Request, reqBody []byte, res *http.Response, resBody []byte) (operation string, err error) {
	ctx := context.Background()
	vreq := req.Clone(ctx)
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	if isProblem(res) {
		if err := s.checkProblem(res, resBody); err != nil {
			return "", err
		}
	}
	if !strings.HasPrefix(req.URL.Path, "/v1/") {
		return "", nil
	}
	route, params, err := s.router.FindRoute(vreq)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		if res.StatusCode != http.StatusNotFound || !isProblem(res) {
			return "", errors.New("the document has no such path: want a 404 problem")
		}
		return "", nil
	case errors.Is(err, routers.ErrMethodNotAllowed):
		if res.StatusCode != http.StatusMethodNotAllowed || !isProblem(res) || res.Header.Get("Allow") == "" {
			return "", errors.New("the document has no such method on this path: want a 405 problem with Allow")
		}
		return "", nil
	case err != nil:
		return "", fmt.Errorf("find the operation: %w", err)
	}

	operation = route.Method + " " + route.Path
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: s.options}
	if reqErr := openapi3filter.ValidateRequest(ctx, in); reqErr != nil && (res.StatusCode < 400 || res.StatusCode > 499) {
		return operation, fmt.Errorf("the document refuses this request, yet the answer is not 4xx: %w", reqErr)
	}
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Body: io.NopCloser(bytes.NewReader(resBody)), Options: s.options,
	}
	if err := openapi3filter.ValidateResponse(ctx, rin); err != nil {
		return operation, err
	}
	if r := route.Operation.Responses.Status(res.StatusCode); r != nil && r.Value != nil && len(r.Value.Content) == 0 && len(resBody) > 0 {
		return operation, fmt.Errorf("%d is documented without a body, yet the answer has one", res.StatusCode)
	}
	return operation, nil
}

func isProblem(res *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	return mt == "application/problem+json"
}

// checkProblem holds a problem document to components/schemas/Problem and
// to the response's status.
func (s *apiSpec) checkProblem(res *http.Response, body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("problem document is not JSON: %w", err)
	}
	opts := append([]openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(), openapi3.MultiErrors()}, schemaOptions...)
	if err := s.problem.VisitJSON(v, opts...); err != nil {
		return fmt.Errorf("problem document does not match components/schemas/Problem: %w", err)
	}
	if st, _ := v.(map[string]any)["status"].(float64); int(st) != res.StatusCode {
		return fmt.Errorf("problem document has status %v, the response %d", st, res.StatusCode)
	}
	return nil
}

// TestOpenAPIValidator_FailsOnWrongAnswers shows that the harness's client
// fails a test whose answer the document does not describe: a stand-in
// server answers documented requests wrongly, each in one way, and the
// request fails with the reason; the right answers pass. The stand-in's
// requests go through a validator of their own, so they do not count as
// tests of the operations.
func TestOpenAPIValidator_FailsOnWrongAnswers(t *testing.T) {
	t.Parallel()
	require.IsType(t, &validatingTransport{}, http.DefaultClient.Transport, "the tests' client is not validated")
	client := &http.Client{Transport: &validatingTransport{next: http.DefaultTransport}}
	const id = "0199c0de-0000-7000-8000-000000000000"
	sub := func(extra string) string {
		return `{"id":"` + id + `","owner":"alice","space":"s1","url":"https://example.com/hook","destination":{"kind":"http"},` +
			`"event_types":[],` +
			`"status":"active","resume_after_seq":0,"last_delivered_seq":0,"last_success_seq":null,"last_success_at":null,"pending":0,` +
			`"created_at":"2026-01-02T03:04:05Z"` + extra + `}`
	}
	answer := func(status int, contentType, body string, header ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			if contentType != "" {
				w.Header().Set("Content-Type", contentType)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	problem := func(status int, kind string) string {
		return fmt.Sprintf(`{"type":"/v1/problems/%s","title":%q,"status":%d,"detail":"d"}`, kind, http.StatusText(status), status)
	}
	const token = "bothy_test"
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		token        string
		handler      http.HandlerFunc
		want         string // "" the exchange passes
	}{
		{"RightList", "GET", "/v1/webhooks", "", token,
			answer(200, "application/json", `{"subscriptions":[`+sub("")+`]}`), ""},
		{"RightProblem", "GET", "/v1/webhooks/" + id, "", token,
			answer(404, "application/problem+json", problem(404, "not-found")), ""},
		{"RightUnknownPath", "GET", "/v1/nothing", "", token,
			answer(404, "application/problem+json", problem(404, "not-found")), ""},
		{"RightRefusalOfARefusedRequest", "POST", "/v1/spaces/s1/events", `{"events":[]}`, token,
			answer(422, "application/problem+json", problem(422, "invalid")), ""},

		{"WrongFieldType", "GET", "/v1/webhooks", "", token,
			answer(200, "application/json", `{"subscriptions":[`+strings.Replace(sub(""), `"pending":0`, `"pending":"0"`, 1)+`]}`),
			`pending`},
		{"UndocumentedField", "GET", "/v1/webhooks/" + id, "", token,
			answer(200, "application/json", sub(`,"paused":true`)), `at '/paused': false schema (a field the document does not name)`},
		{"UndocumentedFieldNextToAllOf", "POST", "/v1/spaces/s1/events", `{"events":[{"type":"item.created"}]}`, token,
			answer(201, "application/json", `{"events":[{"id":"`+id+`","seq":1,"type":"item.created","space":"s1","actor":"alice",`+
				`"occurred_at":"2026-01-02T03:04:05Z","data":{},"duplicate":true,"retried":true}]}`), `retried`},
		{"WrongFormat", "GET", "/v1/webhooks/" + id, "", token,
			answer(200, "application/json", strings.Replace(sub(""), `"`+id+`"`, `"42"`, 1)), `'42' is not valid uuid`},
		{"UnauthenticatedWithoutChallenge", "GET", "/v1/webhooks", "", token,
			answer(401, "application/problem+json", problem(401, "unauthenticated")), `"WWW-Authenticate" missing`},
		{"RightInternal", "GET", "/v1/push/registrations/" + id, "", token,
			answer(500, "application/problem+json", problem(500, "internal")), ""},
		{"MissingRequiredField", "GET", "/v1/spaces/s1/push-preference", "", token,
			answer(200, "application/json", `{"space":"s1"}`), `notify`},
		{"UndocumentedStatus", "POST", "/v1/spaces/s1/events", `{"events":[{"type":"item.created"}]}`, token,
			answer(200, "application/json", `{"events":[]}`), "status is not supported"},
		{"WrongContentType", "GET", "/v1/webhooks", "", token,
			answer(200, "text/plain", `{"subscriptions":[]}`), `"text/plain"`},
		{"ErrorNotAProblem", "GET", "/v1/webhooks/" + id, "", token,
			answer(404, "application/json", `{"error":"not found"}`), `"application/json"`},
		{"ProblemWithAnotherStatus", "GET", "/v1/webhooks/" + id, "", token,
			answer(403, "application/problem+json", problem(404, "not-found")), "problem document has status 404"},
		{"ProblemWithoutTitle", "GET", "/v1/webhooks/" + id, "", token,
			answer(404, "application/problem+json", `{"type":"/v1/problems/not-found","status":404}`), "Problem"},
		{"UnavailableWithoutRetryAfter", "GET", "/v1/webhooks", "", token,
			answer(503, "application/problem+json", problem(503, "unavailable")), `"Retry-After" missing`},
		{"CreatedWithoutLocation", "POST", "/v1/webhooks", `{"space":"s1","url":"https://example.com/hook"}`, token,
			answer(201, "application/json", sub(`,"secret":"whsec_x"`)), `"Location" missing`},
		{"UndocumentedEndpoint", "GET", "/v1/nothing", "", token,
			answer(200, "application/json", `{}`), "no such path"},
		{"UndocumentedMethod", "DELETE", "/v1/webhooks", "", token,
			answer(204, "", ""), "no such method"},
		{"AcceptsARequestTheDocumentRefuses", "POST", "/v1/spaces/s1/events", `{"events":[]}`, token,
			answer(201, "application/json", `{"events":[]}`), "the document refuses this request"},
		{"ServesWithoutToken", "GET", "/v1/webhooks", "", "",
			answer(200, "application/json", `{"subscriptions":[]}`), "the document refuses this request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, body)
			require.NoError(t, err)
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			res, err := client.Do(req)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, res.Body.Close())
				return
			}
			require.Error(t, err, "the validator let a wrong answer through")
			require.ErrorContains(t, err, "openapi/bothy.json disagrees")
			require.ErrorContains(t, err, tc.want)
			t.Log(err)
		})
	}
}
