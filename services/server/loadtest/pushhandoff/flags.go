package pushhandoff

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	shared "github.com/bothy/bothy/services/server/loadtest/harness"
)

// variant is River's fetch settings in one arm of --variants
// (river.fetch_cooldown / river.fetch_poll_interval).
type variant struct {
	Cooldown, Poll time.Duration
}

func (v variant) String() string { return v.Cooldown.String() + "/" + v.Poll.String() }

// options are the parsed flags.
type options struct {
	rate      float64
	duration  time.Duration
	devices   int
	fanout    int
	producers int
	segment   time.Duration
	variants  []variant
	out       string
	config    string
	short     bool
	keep      bool
	// statements: print the statements that took the most PostgreSQL time.
	statements bool
	profile    string
	// mode is "handoff" or "fanout"; events is fanout's measured events.
	mode   string
	events int
	json   bool

	// The deployment (the default) against --in-process.
	inProcess        bool
	bin              string
	workers          int
	connections      int
	eventsPerRequest int
	drain            time.Duration
	pgSettings       shared.Settings
	perfRecord       string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("push_handoff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	rate := fs.String("rate", "500/s", "events appended per second")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "measured load time (all variants together)")
	fs.IntVar(&o.devices, "devices", 100, "registered devices, one per principal")
	fs.IntVar(&o.fanout, "fanout", 1, "receiving devices per event (members per space)")
	fs.IntVar(&o.producers, "producers", 16, "--in-process: concurrent producer goroutines (the deployment has --connections)")
	fs.DurationVar(&o.segment, "segment", 5*time.Second, "--in-process: length of one slice when variants alternate")
	vs := fs.String("variants", "", "--in-process only: comma-separated river.fetch_cooldown/river.fetch_poll_interval pairs to alternate, e.g. 5ms/50ms,1ms/20ms (default: the configuration's)")
	fs.StringVar(&o.out, "out", filepath.Join("perf", "out"), "directory for push_handoff.txt and push_handoff.png")
	fs.StringVar(&o.config, "config", "", "bothy configuration file (perf.push_handoff_p95, river.*, push.*)")
	fs.BoolVar(&o.short, "short", false, "a few seconds, for CI: --duration 3s --devices 20 unless given")
	fs.BoolVar(&o.statements, "statements", false, "print the statements that took the most PostgreSQL time (pg_stat_statements)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch database (and the deployment's private cluster and logs) for inspection")
	fs.StringVar(&o.profile, "cpuprofile", "", "--in-process only: write a CPU profile of the measured load to this file (the deployment has --perf-record)")
	fs.StringVar(&o.mode, "mode", "handoff", "handoff: events at --rate, latency of every message; fanout (--in-process only): one event to all --devices in one space, --events times, one after another")
	fs.IntVar(&o.events, "events", 5, "fanout mode: measured events, each written once the one before was delivered")
	fs.BoolVar(&o.json, "json", false, "end the deployment's output with one JSON line of the figures")
	fs.BoolVar(&o.inProcess, "in-process", false, "run the worker (push only) in this process and append over database connections, for profiling "+
		"and for --variants and --mode fanout; the default runs the built binary as separate api and worker processes and POSTs over HTTP")
	fs.StringVar(&o.bin, "bin", "", "the bothy binary to run (default: built from this checkout)")
	fs.IntVar(&o.workers, "workers", 1, "bothy server --role=worker processes")
	fs.IntVar(&o.connections, "connections", 64, "HTTP connections of the producers (requests open at once)")
	fs.IntVar(&o.eventsPerRequest, "events-per-request", 1, "events in each POST")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "how long messages may still arrive after the load; later ones count as missing")
	fs.StringVar(&o.perfRecord, "perf-record", "", "directory: record the api's and the workers' CPU with perf record during the measured phase (api.perf.data, worker.perf.data)")
	fs.Var(&o.pgSettings, "pg-setting", "a PostgreSQL setting of the deployment's private cluster, k=v, on top of PostgreSQL's defaults (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := o.checkDeployment(set); err != nil {
		return nil, err
	}
	if err := o.applyMode(set); err != nil {
		return nil, err
	}
	if err := o.parseRate(*rate); err != nil {
		return nil, err
	}
	if err := o.checkCounts(); err != nil {
		return nil, err
	}
	if err := o.parseVariants(*vs); err != nil {
		return nil, err
	}
	return o, nil
}

// checkDeployment refuses the flags of the in-process mode without
// --in-process, and checks the deployment's.
func (o *options) checkDeployment(set map[string]bool) error {
	if o.inProcess {
		return nil
	}
	for _, name := range []string{"variants", "segment", "cpuprofile", "producers"} {
		if set[name] {
			return fmt.Errorf("--%s: the in-process mode's; add --in-process", name)
		}
	}
	if o.mode == "fanout" {
		return errors.New("--mode fanout: runs in this process only; add --in-process")
	}
	if o.workers < 1 || o.connections < 1 || o.eventsPerRequest < 1 || o.eventsPerRequest > 100 || o.drain <= 0 {
		return errors.New("--workers, --connections and --drain must be positive, --events-per-request 1..100")
	}
	return nil
}

// applyMode sets the defaults of the mode (and of --short in it) for the
// flags not given, set naming those given, and checks the mode's flags.
func (o *options) applyMode(set map[string]bool) error {
	switch o.mode {
	case "handoff":
		if o.short {
			if !set["duration"] {
				o.duration = 3 * time.Second
			}
			if !set["devices"] {
				o.devices = 20
			}
		}
	case "fanout":
		if !set["devices"] {
			o.devices = 10000
			if o.short {
				o.devices = 200
			}
		}
		if o.short && !set["events"] {
			o.events = 2
		}
		if o.events < 1 {
			return fmt.Errorf("--events %d: want at least 1", o.events)
		}
		o.fanout = o.devices
	default:
		return fmt.Errorf("--mode %q: want handoff or fanout", o.mode)
	}
	return nil
}

// parseRate sets the rate from --rate, such as 500/s.
func (o *options) parseRate(rate string) error {
	r, err := strconv.ParseFloat(strings.TrimSuffix(rate, "/s"), 64)
	if err != nil || r <= 0 || r > 20000 {
		return fmt.Errorf("--rate %q: want events per second such as 500/s", rate)
	}
	o.rate = r
	return nil
}

// checkCounts checks the devices, fanout, durations and producers.
func (o *options) checkCounts() error {
	if o.devices < 1 || o.fanout < 1 || o.fanout > o.devices {
		return fmt.Errorf("--devices %d --fanout %d: want 1 <= fanout <= devices", o.devices, o.fanout)
	}
	if o.duration <= 0 || o.segment <= 0 || o.producers < 1 {
		return errors.New("--duration, --segment and --producers must be positive")
	}
	return nil
}

// parseVariants sets the variants from --variants, COOLDOWN/POLL pairs
// separated by commas; none when vs is "".
func (o *options) parseVariants(vs string) error {
	if vs == "" {
		return nil
	}
	for _, p := range strings.Split(vs, ",") {
		c, pi, ok := strings.Cut(strings.TrimSpace(p), "/")
		cd, err1 := time.ParseDuration(c)
		pd, err2 := time.ParseDuration(pi)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("--variants %q: want COOLDOWN/POLL pairs such as 5ms/50ms", p)
		}
		o.variants = append(o.variants, variant{Cooldown: cd, Poll: pd})
	}
	return nil
}
