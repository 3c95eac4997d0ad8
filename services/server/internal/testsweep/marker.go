// Package testsweep gives the temporary directories that hold processes a
// test or load test starts (private PostgreSQL clusters, pg_auto_failover
// formations, built binaries) an owner, and removes those an earlier run
// left when it was killed before its cleanup ran (go test -timeout, a
// SIGKILL): the processes in them are stopped, then the directory goes.
//
// A directory is the run's when it holds a marker file naming the owning
// process by its process id, its start time (from /proc/PID/stat, so a
// reused process id is not taken for the owner), the boot and the PID
// namespace. The sweep touches only directories with such a marker whose
// owner is gone; nothing else in the temporary folder, whatever its name.
//
// PostgreSQL started by pg_ctl and pg_autoctl's keepers leave the process
// tree of the test (pg_ctl daemonizes the server), so a parent-death
// signal or a process group cannot stop them when the test binary dies:
// the next run's sweep does.
package testsweep

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	gosync "sync"
)

// MarkerName is the marker file's name inside an owned directory.
const MarkerName = ".bothy-test-owner"

// markerVersion starts every marker's single line.
const markerVersion = "bothy-test-owner/1"

var sweepOnce gosync.Once

// MkdirTemp creates a directory in os.TempDir() as os.MkdirTemp does and
// marks it as this process's. The first call in a process first sweeps
// what killed runs left (Sweep).
func MkdirTemp(pattern string) (string, error) {
	sweepOnce.Do(func() { Sweep() })
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if err := writeMarker(dir, self()); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// Disown removes dir's marker, so no later sweep removes it: for a
// directory kept on purpose (a load test's --keep).
func Disown(dir string) error {
	err := os.Remove(filepath.Join(dir, MarkerName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// owner identifies a process across process id reuse and reboots.
type owner struct {
	pid   int
	start string // start time in clock ticks after boot, /proc/PID/stat field 22
	boot  string // /proc/sys/kernel/random/boot_id
	pidNS string // the PID namespace, as /proc/self/ns/pid names it
}

func (o owner) String() string {
	return fmt.Sprintf("%s pid=%d start=%s boot=%s pidns=%s", markerVersion, o.pid, o.start, o.boot, o.pidNS)
}

// self is this process as an owner.
func self() owner {
	pid := os.Getpid()
	start, _ := startTime(pid)
	return owner{pid: pid, start: start, boot: bootID(), pidNS: pidNamespace()}
}

// writeMarker writes o into dir's marker, whole or not at all (a sweep
// in another process may read it at any time).
func writeMarker(dir string, o owner) error {
	tmp := filepath.Join(dir, MarkerName+".new")
	if err := os.WriteFile(tmp, []byte(o.String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, MarkerName))
}

// readMarker parses dir's marker; ok is false when there is none or it is
// not one this package wrote.
func readMarker(dir string) (o owner, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, MarkerName))
	if err != nil {
		return owner{}, false
	}
	fields := strings.Fields(string(b))
	if len(fields) != 5 || fields[0] != markerVersion {
		return owner{}, false
	}
	kv := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	o = owner{start: kv["start"], boot: kv["boot"], pidNS: kv["pidns"]}
	if o.pid, err = strconv.Atoi(kv["pid"]); err != nil || o.pid <= 0 || o.start == "" {
		return owner{}, false
	}
	return o, true
}

// ownerState is what a marker's owner is to this process.
type ownerState int

const (
	ownerAlive   ownerState = iota
	ownerGone               // the process is not there, or another one has its id
	ownerUnknown            // in another PID namespace: not this process's to judge
)

// state says whether o still runs.
func (o owner) state() ownerState {
	if o.boot != bootID() {
		return ownerGone // started before the last reboot
	}
	if o.pidNS != pidNamespace() {
		return ownerUnknown
	}
	start, err := startTime(o.pid)
	if err != nil || start != o.start {
		return ownerGone
	}
	return ownerAlive
}
