package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

func TestRestoreFinalizeCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	_, err := db.Pool.Exec(ctx, `UPDATE event_seq SET last_seq = 42`)
	require.NoError(t, err)

	var out, errOut bytes.Buffer
	e := &env{stdout: &out, stderr: &errOut}
	code := run(ctx, []string{"restore", "finalize", "--database.url=" + db.URL}, e)
	require.Equal(t, 0, code, errOut.String())
	require.Contains(t, out.String(), "CONSUMER")
	require.Regexp(t, `webhooks\s+0\s+42\s+42`, out.String())
	require.Contains(t, out.String(), "cursors to the head")

	out.Reset()
	code = run(ctx, []string{"restore", "finalize", "--json", "--database.url=" + db.URL}, e)
	require.Equal(t, 0, code, errOut.String())
	var got struct {
		Cursors []postgres.CursorMove `json:"cursors"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.NotEmpty(t, got.Cursors)
	for _, m := range got.Cursors {
		require.Equal(t, postgres.CursorMove{Consumer: m.Consumer, From: 42, To: 42}, m)
	}
}
