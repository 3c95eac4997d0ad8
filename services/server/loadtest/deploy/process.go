package deploy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/loadtest/cost"
)

// ServerParams says how to start one "bothy server" process.
type ServerParams struct {
	// Bin is the binary. Required.
	Bin string
	// Role is api, worker or all. Required.
	Role string
	// Keys are configuration keys, passed as BOTHY_<KEY> variables;
	// database.url is required. server.listen_addr is set to a free
	// loopback port unless given.
	Keys map[string]string
	// ConfigFile, if set, is passed as --config.
	ConfigFile string
	// LogDir receives the process's stderr and stdout as
	// bothy-<role>-<n>.log. Required.
	LogDir string
	// Name tells processes of one role apart in the log file's name.
	Name string
}

// Server is a running "bothy server" process. Its process group is its
// own, so that Stop ends whatever it started, and it dies with the load
// test (a parent-death signal) if the load test is killed.
type Server struct {
	Role string
	// Addr is where its HTTP server listens (its /readyz, /metrics and, for
	// the api role, /v1).
	Addr string
	// Started is when it was started.
	Started time.Time
	Log     string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartServer starts p's process; Ready waits until it serves.
func StartServer(ctx context.Context, p *ServerParams) (*Server, error) {
	keys := map[string]string{}
	for k, v := range p.Keys {
		keys[k] = v
	}
	if keys["server.listen_addr"] == "" {
		addr, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		keys["server.listen_addr"] = addr
	}
	args := []string{"server", "--role=" + p.Role}
	if p.ConfigFile != "" {
		args = append(args, "--config", p.ConfigFile)
	}
	name := "bothy-" + p.Role
	if p.Name != "" {
		name += "-" + p.Name
	}
	s := &Server{Role: p.Role, Addr: keys["server.listen_addr"], Log: filepath.Join(p.LogDir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(p.Bin, args...)
	s.cmd.Env = serverEnv(os.Environ(), keys)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.Started = time.Now()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// serverEnv is environ without bothy's variables (the caller's own, such
// as a test database URL, are not the server's configuration) plus keys
// as BOTHY_<KEY> variables.
func serverEnv(environ []string, keys map[string]string) []string {
	var env []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "BOTHY_") {
			env = append(env, kv)
		}
	}
	for k, v := range keys {
		env = append(env, config.EnvName(k)+"="+v)
	}
	return env
}

// FreeAddr is a loopback address with a port nothing listened on a moment
// ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Ready waits, at most within, until the process answers 200 on /readyz.
func (s *Server) Ready(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	url := "http://" + s.Addr + "/readyz"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("bothy %s ended before it was ready (%v); its log: %s", s.Role, s.err, s.Log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bothy %s not ready after %s; its log: %s", s.Role, within, s.Log)
		}
	}
}

// PID is its process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// CPU is the CPU time it has used so far.
func (s *Server) CPU() (time.Duration, error) { return cost.ProcessCPU(s.PID()) }

// Done is closed when the process has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err says how it ended, once Done is closed.
func (s *Server) Err() error { return s.err }

// Stop asks it to stop (SIGTERM), waits at most within, then kills its
// process group. It returns the CPU time it used, read before it ended.
func (s *Server) Stop(within time.Duration) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(within):
		_ = syscall.Kill(-s.PID(), syscall.SIGKILL)
		<-s.done
	}
}

// ErrEnded is returned by Watch when a process ended during the load.
var ErrEnded = errors.New("a bothy process ended")

// Watch returns a channel that receives an error once any of servers ends.
func Watch(servers ...*Server) <-chan error {
	out := make(chan error, 1)
	for _, s := range servers {
		go func() {
			<-s.done
			select {
			case out <- fmt.Errorf("%w: %s (%v); its log: %s", ErrEnded, s.Role, s.err, s.Log):
			default:
			}
		}()
	}
	return out
}

// RoundTrips is the process's bothy_database_round_trips_total summed over
// its kinds, read from its /metrics; false when the binary does not
// export it (an older revision).
func (s *Server) RoundTrips(ctx context.Context) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("bothy %s /metrics: %s", s.Role, resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "bothy_database_round_trips_total") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, false, fmt.Errorf("bothy %s /metrics: %q: %w", s.Role, sc.Text(), err)
		}
		sum, found = sum+v, true
	}
	return sum, found, sc.Err()
}
