package main

import (
	"fmt"
	"time"
)

// timeFlag is a flag that takes a point in time, and its value as typed.
type timeFlag struct {
	name string // with its dashes: --since
	v    *string
}

// parseTime reads a time flag's value: an RFC 3339 time, or a duration
// (10m, 36h) that means that long before now.
func parseTime(flag, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%w: %s %q: want an RFC 3339 time such as 2026-12-01T08:00:00Z, "+
		"or a duration before now such as 10m or 36h", errUsage, flag, v)
}

// resolveTimes rewrites each set flag's value as the RFC 3339 time it
// means, the form the API and the database side both take, so that a
// duration counts back from one moment for every flag of the command.
func resolveTimes(now time.Time, flags ...timeFlag) error {
	for _, f := range flags {
		if *f.v == "" {
			continue
		}
		t, err := parseTime(f.name, *f.v, now)
		if err != nil {
			return err
		}
		*f.v = t.UTC().Format(time.RFC3339Nano)
	}
	return nil
}
