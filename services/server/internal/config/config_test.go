package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/config"
)

func TestLoad(t *testing.T) {
	t.Parallel()

	t.Run("DefaultsAreValid", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Load("", nil, nil)
		require.NoError(t, err)
		require.Equal(t, 5000, cfg.Consumer.BatchSize)
		require.Equal(t, time.Second, cfg.Consumer.PollInterval)
		require.Less(t, cfg.Consumer.PendingAlertAfter, cfg.Sync.EventRetention)
		_, src := cfg.Value("consumer.batch_size")
		require.Equal(t, config.SourceDefault, src)
	})

	t.Run("FileThenEnvironmentThenFlagsWin", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "bothy.conf")
		require.NoError(t, os.WriteFile(path, []byte("# comment\nconsumer.batch_size = 10\nconsumer.poll_interval = \"2s\"\nlog.level = warn\n"), 0o600))
		cfg, err := config.Load(path,
			[]string{"BOTHY_CONSUMER_BATCH_SIZE=20", "BOTHY_LOG_LEVEL=error", "BOTHY_TEST_DATABASE_URL=ignored", "PATH=/bin"},
			map[string]string{"consumer.batch_size": "30"})
		require.NoError(t, err)
		require.Equal(t, 30, cfg.Consumer.BatchSize)
		require.Equal(t, 2*time.Second, cfg.Consumer.PollInterval)
		require.Equal(t, "error", cfg.Log.Level)
		for key, want := range map[string]string{"consumer.batch_size": config.SourceFlag, "log.level": config.SourceEnv,
			"consumer.poll_interval": config.SourceFile, "sync.event_retention": config.SourceDefault} {
			_, src := cfg.Value(key)
			require.Equal(t, want, src, key)
		}
	})

	t.Run("BadValuesNameTheKeyAndTheRange", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ key, value, want string }{
			{"consumer.batch_size", "0", "consumer.batch_size (from flag): \"0\" is not an integer in 1..100000"},
			{"consumer.poll_interval", "fast", "consumer.poll_interval (from flag): \"fast\" is not a duration in 10ms..1h0m0s"},
			{"server.role", "both", "server.role (from flag): \"both\" is not one of api, worker, all"},
			{"database.url", "mysql://x", "database.url (from flag): not a postgres://host/db URL (or postgres:///db?host=/socket/dir)"},
			{"database.url", "postgres:///bothy", "database.url (from flag): not a postgres://host/db URL"},
		} {
			_, err := config.Load("", nil, map[string]string{tc.key: tc.value})
			require.ErrorContains(t, err, tc.want)
		}
	})

	t.Run("DatabaseURLMayNameAUnixSocket", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Load("", nil, map[string]string{"database.url": "postgres://postgres@/bothy?host=/var/run/postgresql"})
		require.NoError(t, err)
		require.Equal(t, "postgres://postgres@/bothy?host=/var/run/postgresql", cfg.Database.URL)
	})

	t.Run("UnknownKeysAreRefusedInEverySource", func(t *testing.T) {
		t.Parallel()
		_, err := config.Load("", []string{"BOTHY_CONSUMER_BATCHSIZE=5"}, nil)
		require.ErrorContains(t, err, "BOTHY_CONSUMER_BATCHSIZE: no such configuration key")
		_, err = config.Load("", nil, map[string]string{"consumer.batchsize": "5"})
		require.ErrorContains(t, err, "--consumer.batchsize: no such configuration key")
		path := filepath.Join(t.TempDir(), "bothy.conf")
		require.NoError(t, os.WriteFile(path, []byte("consumer.batchsize = 5\n"), 0o600))
		_, err = config.Load(path, nil, nil)
		require.ErrorContains(t, err, "line 1: no such configuration key \"consumer.batchsize\"")
	})

	t.Run("TheCLIsOwnVariablesAreNotKeys", func(t *testing.T) {
		t.Parallel()
		environ := []string{"BOTHY_LOG_LEVEL=error"}
		for _, name := range config.CLIEnv {
			environ = append(environ, name+"=set by the user")
		}
		cfg, err := config.Load("", environ, nil)
		require.NoError(t, err)
		require.Equal(t, "error", cfg.Log.Level)
		_, err = config.Load("", append(environ, "BOTHY_TOKENS=x"), nil)
		require.ErrorContains(t, err, "BOTHY_TOKENS: no such configuration key")
	})

	t.Run("NoKeyTakesACLIVariable", func(t *testing.T) {
		t.Parallel()
		for _, k := range config.Keys {
			require.NotContains(t, config.CLIEnv, config.EnvName(k.Name), k.Name)
		}
	})

	t.Run("AlertMustFireBeforeRetention", func(t *testing.T) {
		t.Parallel()
		_, err := config.Load("", nil, map[string]string{"consumer.pending_alert_after": "168h", "sync.event_retention": "168h"})
		require.ErrorContains(t, err, "consumer.pending_alert_after (168h0m0s) must be strictly below sync.event_retention (168h0m0s)")
		_, err = config.Load("", nil, map[string]string{"consumer.pending_alert_after": "167h", "sync.event_retention": "168h"})
		require.NoError(t, err)
	})

	t.Run("EventWaiterLimits", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Load("", nil, nil)
		require.NoError(t, err)
		require.Equal(t, 100, cfg.Server.MaxEventWaitersPerToken)
		require.Equal(t, 10000, cfg.Server.MaxEventWaiters)
		require.Equal(t, 30*time.Second, cfg.Server.EventStreamWriteTimeout)
		_, err = config.Load("", nil, map[string]string{"server.max_event_waiters_per_token": "0"})
		require.ErrorContains(t, err, `server.max_event_waiters_per_token (from flag): "0" is not an integer in 1..100000`)
		_, err = config.Load("", nil, map[string]string{"server.event_stream_write_timeout": "10ms"})
		require.ErrorContains(t, err, `server.event_stream_write_timeout (from flag): "10ms" is not a duration in 100ms..1h0m0s`)
		_, err = config.Load("", nil, map[string]string{"server.max_event_waiters_per_token": "500", "server.max_event_waiters": "200"})
		require.ErrorContains(t, err, "server.max_event_waiters_per_token (500) must be at most server.max_event_waiters (200)")
	})

	t.Run("RetryBudgetEndsBeforeRetention", func(t *testing.T) {
		t.Parallel()
		_, err := config.Load("", nil, map[string]string{"webhooks.retry_budget": "48h", "sync.event_retention": "48h",
			"consumer.pending_alert_after": "1h", "sync.event_partition_interval": "1h"})
		require.ErrorContains(t, err, "webhooks.retry_budget (48h0m0s) must be below sync.event_retention (48h0m0s)")
	})
}
