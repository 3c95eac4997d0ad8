package logbuf_test

import (
	"bytes"
	"log/slog"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/logbuf"
)

// recorder counts the writes it gets.
type recorder struct {
	mu     gosync.Mutex
	buf    bytes.Buffer
	writes int
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	return r.buf.Write(p)
}

func (r *recorder) state() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String(), r.writes
}

func TestWriter(t *testing.T) {
	t.Parallel()

	t.Run("RecordsGoOutTogetherWithinTheInterval", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		w := logbuf.New(rec, &logbuf.Config{Interval: 20 * time.Millisecond})
		log := slog.New(logbuf.Handler(slog.NewTextHandler(w, nil), w, slog.LevelWarn))
		for range 100 {
			log.Info("http request")
		}
		out, writes := rec.state()
		require.Zero(t, writes, "nothing written before the interval")
		require.Empty(t, out)
		require.Eventually(t, func() bool { _, n := rec.state(); return n == 1 }, 10*time.Second, time.Millisecond)
		out, _ = rec.state()
		require.Equal(t, 100, bytes.Count([]byte(out), []byte("http request")))
	})
	t.Run("AWarningGoesOutAtOnceWithWhatCameBefore", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		w := logbuf.New(rec, &logbuf.Config{Interval: time.Hour})
		log := slog.New(logbuf.Handler(slog.NewTextHandler(w, nil), w, slog.LevelWarn))
		log.Info("first")
		log.With("k", "v").Warn("second")
		out, writes := rec.state()
		require.Equal(t, 1, writes)
		require.Regexp(t, `(?s)first.*second.*k=v`, out)
	})
	t.Run("AFullBufferGoesOutAtOnce", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		w := logbuf.New(rec, &logbuf.Config{Interval: time.Hour, Size: 10})
		_, _ = w.Write([]byte("12345"))
		_, writes := rec.state()
		require.Zero(t, writes)
		_, _ = w.Write([]byte("67890"))
		out, writes := rec.state()
		require.Equal(t, 1, writes)
		require.Equal(t, "1234567890", out)
	})
	t.Run("FlushWritesWhatWaits", func(t *testing.T) {
		t.Parallel()
		rec := &recorder{}
		w := logbuf.New(rec, &logbuf.Config{Interval: time.Hour})
		_, _ = w.Write([]byte("last words"))
		require.NoError(t, w.Flush())
		out, _ := rec.state()
		require.Equal(t, "last words", out)
	})
}
