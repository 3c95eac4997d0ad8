package postgres

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/jackc/pgx/v5"
)

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// ConnString is the database to listen on. Required.
	ConnString string
	// ApplicationName, if set, names the connection in pg_stat_activity.
	ApplicationName string
	// MinBackoff and MaxBackoff bound the reconnect delay. Defaults 50ms, 5s.
	MinBackoff, MaxBackoff time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// BeforeConnect, if set, is called before each connection attempt
	// (tests hold a reconnect back to commit events while nobody listens).
	BeforeConnect func(ctx context.Context)
	// OnConnect, if set, is called with the backend pid after each LISTEN
	// succeeds (tests use it to terminate the connection).
	OnConnect func(pid uint32)
	// Channels are further channels to listen on, each with the function
	// its notifications' payloads go to; each is also called with "" after
	// every (re)connect.
	Channels map[string]func(payload string)
}

// Listener holds one dedicated connection (not from the pool, which would
// hand it back and lose the LISTEN) on channel event_log and calls wake on
// every notification (and passes those of ListenerConfig.Channels on). After the connection is lost it reconnects with
// backoff and calls wake once LISTEN is back: anything committed while it
// was away is then read at once instead of at the next poll.
type Listener struct {
	cfg  ListenerConfig
	wake func()
}

// NewListener returns a listener calling wake.
func NewListener(wake func(), cfg *ListenerConfig) *Listener {
	c := *cfg
	c.MinBackoff = cmp.Or(c.MinBackoff, 50*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 5*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Listener{cfg: c, wake: wake}
}

// Run listens until ctx is cancelled and returns nil then.
func (l *Listener) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for {
		connected, err := l.listenOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if connected {
			backoff = 0 // a fresh loss starts again from the shortest delay
		}
		backoff = min(cmp.Or(backoff*2, l.cfg.MinBackoff), l.cfg.MaxBackoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		l.cfg.Logger.WarnContext(ctx, "event_log listener lost its connection", slog.Duration("retry_in", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (l *Listener) listenOnce(ctx context.Context) (connected bool, err error) {
	if l.cfg.BeforeConnect != nil {
		l.cfg.BeforeConnect(ctx)
	}
	cc, err := pgx.ParseConfig(l.cfg.ConnString)
	if err != nil {
		return false, err
	}
	if l.cfg.ApplicationName != "" {
		cc.RuntimeParams["application_name"] = l.cfg.ApplicationName
	}
	dbconn.ApplyDefaults(&cc.Config)
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(connectCtx, cc)
	cancel()
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return false, err
	}
	for ch := range l.cfg.Channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return false, err
		}
	}
	if l.cfg.OnConnect != nil {
		l.cfg.OnConnect(conn.PgConn().PID())
	}
	// Whatever committed while no LISTEN was in place is read now.
	l.wake()
	for _, fn := range l.cfg.Channels {
		fn("")
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if fn, ok := l.cfg.Channels[n.Channel]; ok {
			fn(n.Payload)
			continue
		}
		l.wake()
	}
}
