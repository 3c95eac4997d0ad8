package harness

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// FlagDefaults are a load test's defaults for the flags every load test
// has.
type FlagDefaults struct {
	// Rate is --rate, e.g. "500/s"; MaxRate the highest rate accepted.
	Rate    string
	MaxRate float64
	// Duration is --duration: how long the measured load runs.
	Duration time.Duration
	// Producers is --producers: concurrent producer goroutines.
	Producers int
	// ConfigKeys says which configuration keys --config matters for.
	ConfigKeys string
	// Short is what --short sets, flag name to value, for every flag not
	// given; it is also --short's help text.
	Short map[string]string
}

// Flags are the parsed flags every load test has.
type Flags struct {
	Rate      float64
	Duration  time.Duration
	Producers int
	// Config is the bothy configuration file (--config).
	Config string
	// Short asks for a run of a few seconds, for go test.
	Short bool
	// Keep leaves the scratch database in place for inspection.
	Keep bool

	fs   *flag.FlagSet
	d    *FlagDefaults
	rate string
}

// NewFlags returns a flag set named tool that holds the shared flags with
// d's defaults; the caller adds its own flags to it and calls Parse.
func NewFlags(tool string, stderr io.Writer, d *FlagDefaults) (*flag.FlagSet, *Flags) {
	fs := flag.NewFlagSet(tool, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &Flags{fs: fs, d: d}
	fs.StringVar(&f.rate, "rate", d.Rate, "events appended per second (open loop)")
	fs.DurationVar(&f.Duration, "duration", d.Duration, "measured load time")
	fs.IntVar(&f.Producers, "producers", d.Producers, "concurrent producer goroutines")
	fs.StringVar(&f.Config, "config", "", "bothy configuration file ("+d.ConfigKeys+")")
	fs.BoolVar(&f.Short, "short", false, "a few seconds, for go test; unless given: "+shortHelp(d.Short))
	fs.BoolVar(&f.Keep, "keep", false, "keep the scratch database for inspection")
	return fs, f
}

// Parse parses args, applies --short's values to the flags not given, and
// checks the shared flags.
func (f *Flags) Parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if f.Short {
		set := map[string]bool{}
		f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		for name, v := range f.d.Short {
			if set[name] {
				continue
			}
			if err := f.fs.Set(name, v); err != nil {
				return err
			}
		}
	}
	var err error
	if f.Rate, err = ParseRate(f.rate, f.d.MaxRate); err != nil {
		return err
	}
	if f.Duration <= 0 || f.Producers < 1 {
		return errors.New("--duration and --producers must be positive")
	}
	return nil
}

func shortHelp(short map[string]string) string {
	var s string
	for _, name := range sortedKeys(short) {
		s += " --" + name + " " + short[name]
	}
	if s == "" {
		return "nothing"
	}
	return s[1:]
}

// Settings is a repeatable k=v flag, such as --pg-setting.
type Settings []string

func (s *Settings) String() string { return strings.Join(*s, " ") }

// Set takes one k=v.
func (s *Settings) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	*s = append(*s, v)
	return nil
}

// Map is the settings by key, the last value of a key winning.
func (s Settings) Map() map[string]string {
	out := map[string]string{}
	for _, kv := range s {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}
