// Package httpapi is bothy's HTTP API on the api role (/v1, JSON): webhook
// subscriptions with their deliveries, push registrations and preferences,
// and appending events to a space (a stand-in for the sync write path,
// through the same producer as every other writer). It also mounts the River
// UI for operators under /admin/river/ when server.admin_token is set.
//
// Every /v1 endpoint but the OpenAPI document needs a bearer token
// (authz.Authenticate) and checks the subject's rights and the token's
// scopes with authz.Allowed before it touches anything. Errors are RFC 9457
// problem documents (application/problem+json). Request bodies are bounded
// in size and refuse unknown fields, so a typo in a field name is an error
// instead of a silently ignored setting.
//
// The routes are declared once, in routes(); openapi/bothy.json documents
// them, and a test holds the two together.
package httpapi
