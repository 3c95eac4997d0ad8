package page_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/page"
)

func TestKey_EncodeDecode(t *testing.T) {
	t.Parallel()
	k := page.Key{List: "webhooks", Time: time.Date(2026, 12, 3, 8, 0, 0, 123456000, time.UTC), ID: uuid.New()}
	got, err := page.Decode("webhooks", k.Encode())
	require.NoError(t, err)
	require.True(t, k.Time.Equal(got.Time), "to the microsecond the database keeps")
	require.Equal(t, k.ID, got.ID)

	s := page.Key{List: "deliveries", Seq: 42}
	got, err = page.Decode("deliveries", s.Encode())
	require.NoError(t, err)
	require.Equal(t, int64(42), got.Seq)

	first, err := page.Decode("webhooks", "")
	require.NoError(t, err)
	require.Equal(t, page.Key{}, first, "no cursor is the first page")

	nul := page.Key{List: "webhooks", Name: "a\x00b"}.Encode() // no name has one; PostgreSQL's text cannot
	for _, bad := range []string{s.Encode(), "not base64!", "bm90IGpzb24", string(make([]byte, 2000)), nul} {
		_, err := page.Decode("webhooks", bad)
		require.ErrorIs(t, err, page.ErrBadCursor, bad)
	}
}

func TestLimit(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{"": page.DefaultLimit, "1": 1, "500": 500} {
		n, err := page.Limit(v)
		require.NoError(t, err)
		require.Equal(t, want, n)
	}
	for _, bad := range []string{"0", "501", "-1", "ten", "5x", "05", "18446744073709551617"} {
		_, err := page.Limit(bad)
		require.ErrorContains(t, err, "want 1..500", bad)
	}
}
