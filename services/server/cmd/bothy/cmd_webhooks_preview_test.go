package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWebhooksFilterAndPreview_CLI(t *testing.T) {
	t.Parallel()
	environ, sub := cliWebhook(t, "--filter", "data.total > 100", "--transform", "{'t': data.total}")
	require.Equal(t, "data.total > 100", sub["filter"])
	id := sub["id"].(string)

	code, stdout, stderr := runCLI(t, environ, "webhooks", "preview", id, "--event", `{"type": "order.created", "data": {"total": 150}}`)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "order.created")
	require.Contains(t, stdout, "true")
	require.Contains(t, stdout, `{"t":150}`, "the body the transform makes")

	code, stdout, stderr = runCLI(t, environ, "webhooks", "preview", id, "--filter", "data.total < 100", "--json",
		"--event", `{"type": "order.created", "data": {"total": 150}}`)
	require.Equal(t, 0, code, stderr)
	var v struct {
		Filter  string `json:"filter"`
		Results []struct {
			Matched bool `json:"matched"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	require.Equal(t, "data.total < 100", v.Filter, "the given filter, not the saved one")
	require.False(t, v.Results[0].Matched)

	code, stdout, stderr = runCLI(t, environ, "webhooks", "preview", id)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "no recent events")
	code, _, stderr = runCLI(t, environ, "events", "emit", "--space", "s1", "--type", "order.created", "--actor", "alice",
		"--data", `{"total": 150}`, "--count", "3")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = runCLI(t, environ, "webhooks", "preview", id, "--limit", "2", "--json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	require.Len(t, v.Results, 2, "the space's newest events")
	require.True(t, v.Results[1].Matched)

	code, _, stderr = runCLI(t, environ, "webhooks", "update", id, "--filter", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "filter: 1:1: undeclared reference to 'nope'")
	code, stdout, stderr = runCLI(t, environ, "webhooks", "update", id, "--filter", "", "--json")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, `"filter"`, "an empty --filter removes it")
}
