package webhookhandoff

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
)

// keysPerReader bounds the stream keys one XREAD reads, so the receiver
// reads several at once on connections of their own.
const keysPerReader = 25

// consumeRedis reads every subscription's stream key with blocking XREADs
// from the start, each reader on its own connection over up to
// keysPerReader keys, until ctx is done; stopping deletes the keys.
func (r *receiver) consumeRedis(ctx context.Context, b *brokerParams) (func(), error) {
	opts, err := redis.ParseURL(b.URL)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opts.DisableIdentity = true
	opts.PoolSize = len(r.endpoints)/keysPerReader + 2
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	keys := make([]string, len(r.endpoints))
	for i := range keys {
		keys[i] = b.address(i)
	}
	done := make(chan struct{})
	readers := 0
	for lo := 0; lo < len(keys); lo += keysPerReader {
		readers++
		go func(lo, hi int) {
			defer func() { done <- struct{}{} }()
			r.readStreams(ctx, client, keys[lo:hi], lo)
		}(lo, min(lo+keysPerReader, len(keys)))
	}
	return func() {
		for range readers {
			<-done
		}
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Del(dctx, keys...).Err()
		_ = client.Close()
	}, nil
}

// readStreams records every entry of keys (subscriptions first, first+1,
// ...) until ctx is done.
func (r *receiver) readStreams(ctx context.Context, client *redis.Client, keys []string, first int) {
	ids := make([]string, len(keys))
	index := make(map[string]int, len(keys))
	for k, key := range keys {
		ids[k], index[key] = "0", k
	}
	header := http.Header{}
	for ctx.Err() == nil {
		streams, err := client.XRead(ctx, &redis.XReadArgs{Streams: append(append([]string{}, keys...), ids...),
			Count: 1000, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond) // a broken connection: the next XREAD dials again
			}
			continue
		}
		for _, s := range streams {
			k := index[s.Stream]
			for _, e := range s.Messages {
				ids[k] = e.ID
				clear(header)
				var body []byte
				for name, v := range e.Values {
					if str, ok := v.(string); ok {
						if name == "body" {
							body = []byte(str)
						} else {
							header.Set(name, str)
						}
					}
				}
				r.deliver(first+k, header, body)
			}
		}
	}
}
