package testsweep

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// startTime is field 22 of /proc/PID/stat: when the process started, in
// clock ticks after boot. With the process id it names one process.
func startTime(pid int) (string, error) {
	f, err := statFields(pid)
	if err != nil {
		return "", err
	}
	return f[statStart], nil
}

// Indexes into statFields: the fields after the command name, which may
// hold spaces and parentheses, so they count from field 3 (state).
const (
	statPPID  = 4 - 3
	statStart = 22 - 3
)

func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("testsweep: unexpected /proc stat line")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) <= statStart {
		return nil, errors.New("testsweep: short /proc stat line")
	}
	return f, nil
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return strings.NewReplacer("[", "", "]", "", ":", "").Replace(ns)
}

// process is a running process as /proc shows it.
type process struct {
	pid, ppid int
	start     string
	exe, cwd  string
	args      []string
}

// processes lists the processes this process may inspect, except itself.
func processes() []process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	me := os.Getpid()
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me {
			continue
		}
		if p, ok := readProcess(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

func readProcess(pid int) (process, bool) {
	f, err := statFields(pid)
	if err != nil {
		return process{}, false
	}
	p := process{pid: pid, start: f[statStart]}
	p.ppid, _ = strconv.Atoi(f[statPPID])
	dir := "/proc/" + strconv.Itoa(pid)
	p.exe, _ = os.Readlink(dir + "/exe")
	p.exe = strings.TrimSuffix(p.exe, " (deleted)")
	p.cwd, _ = os.Readlink(dir + "/cwd")
	cmdline, _ := os.ReadFile(dir + "/cmdline")
	for a := range bytes.SplitSeq(bytes.TrimRight(cmdline, "\x00"), []byte{0}) {
		p.args = append(p.args, string(a))
	}
	return p, true
}

// alive reports whether p still runs (and not another process with its
// id).
func (p process) alive() bool {
	start, err := startTime(p.pid)
	if err != nil || start != p.start {
		return false
	}
	// A zombie has finished; only its parent's wait is missing.
	f, _ := statFields(p.pid)
	return len(f) > 0 && f[0] != "Z"
}

// postgresPrograms are the programs of a cluster or formation that may
// run in an owned directory: the server and its children, pg_ctl, and
// pg_auto_failover's keeper and its children.
var postgresPrograms = map[string]bool{"postgres": true, "postmaster": true, "pg_ctl": true, "pg_autoctl": true}

// heldBy reports whether p belongs to what dir holds: its program is in
// dir (a binary a test built there), or it is a PostgreSQL program working
// in dir (its working directory, as the server's is its data directory)
// or naming a path in dir on its command line (-D, --pgdata). A process
// that merely has dir as its working directory, such as a shell, is not.
func (p process) heldBy(dir string) bool {
	if within(p.exe, dir) {
		return true
	}
	if !postgresPrograms[filepath.Base(p.exe)] {
		return false
	}
	if within(p.cwd, dir) {
		return true
	}
	for _, a := range p.args {
		if _, v, ok := strings.Cut(a, "="); ok && within(v, dir) {
			return true
		}
		if within(a, dir) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
