package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	gosync "sync"
	"syscall"
	"time"
)

// buildBinary builds cmd/bothy of the module that holds dir into out. It is
// the tree the soak runs from, so a scratch copy with a deliberate break
// soaks its own code.
func buildBinary(ctx context.Context, dir, out string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" {
		return "", fmt.Errorf("not inside the bothy module (go env GOMOD is empty)")
	}
	bin := filepath.Join(out, "bothy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/server/cmd/bothy")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %v\n%s", root, err, b)
	}
	return bin, nil
}

// proc is one running "bothy server" process.
type proc struct {
	name    string
	role    string
	cmd     *exec.Cmd
	logPath string
	addr    chan string
	done    chan error // receives the exit once
	started time.Time

	mu       gosync.Mutex
	tail     []string // last lines of stderr
	exited   bool
	exit     error
	clientID string // River client ID under the liveness lock (workers)
}

var (
	addrLine     = regexp.MustCompile(`msg="bothy server started".* addr=(\S+)`)
	clientIDLine = regexp.MustCompile(`msg="liveness lock held" client_id=(\S+)`)
)

// startProc starts bin with args and env; stderr goes to a log file in dir
// (kept for inspection) and its last lines are kept for the report.
func startProc(bin, dir, name, role string, env []string) (*proc, error) {
	p := &proc{name: name, role: role, addr: make(chan string, 1), done: make(chan error, 1), started: time.Now()}
	p.cmd = exec.Command(bin, "server", "--role="+role)
	p.cmd.Env = env
	// Killed with the soak when it dies without stopping them.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.logPath = filepath.Join(dir, name+".log")
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		defer f.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = io.WriteString(f, line+"\n")
			p.mu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > 20 {
				p.tail = p.tail[len(p.tail)-20:]
			}
			p.mu.Unlock()
			if m := clientIDLine.FindStringSubmatch(line); m != nil {
				p.mu.Lock()
				p.clientID = m[1]
				p.mu.Unlock()
			}
			if m := addrLine.FindStringSubmatch(line); m != nil {
				select {
				case p.addr <- m[1]:
				default:
				}
			}
		}
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exited, p.exit = true, err
		p.mu.Unlock()
		p.done <- err
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// appName is the application_name of the process's pool connections (app.OpenPool).
func (p *proc) appName() string { return fmt.Sprintf("bothy-%s-%d", p.role, p.pid()) }

// listenAppName is the application_name of its LISTEN connection.
func (p *proc) listenAppName() string { return p.appName() + "-listen" }

// riverClientID is the River client ID the process logged with its
// liveness lock ("" before that, and for the api process).
func (p *proc) riverClientID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clientID
}

func (p *proc) tailText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

func (p *proc) hasExited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.exit
}

// waitReady waits for the "started" line and then for /readyz to answer 200.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	var addr string
	select {
	case addr = <-p.addr:
	case err := <-p.done:
		p.done <- err
		return "", fmt.Errorf("%s exited before serving: %v\n%s", p.name, err, p.tailText())
	case <-t.C:
		return "", fmt.Errorf("%s did not start within %s\n%s", p.name, timeout, p.tailText())
	case <-ctx.Done():
		return "", ctx.Err()
	}
	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := getOK(ctx, "http://"+addr+"/readyz"); ok {
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s: /readyz not 200 within %s", p.name, timeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func getOK(ctx context.Context, url string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() error {
	if ok, _ := p.hasExited(); ok {
		return fmt.Errorf("%s had already exited", p.name)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		p.done <- err
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s did not die on SIGKILL", p.name)
	}
}

// stop sends SIGTERM and waits up to timeout for a clean exit; it kills the
// process after that. It returns the exit error of a process that did not
// stop cleanly.
func (p *proc) stop(timeout time.Duration) error {
	if ok, err := p.hasExited(); ok {
		return fmt.Errorf("%s had exited: %v", p.name, err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			return fmt.Errorf("%s: exit after SIGTERM: %v\n%s", p.name, err, p.tailText())
		}
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM\n%s", p.name, timeout, p.tailText())
	}
}
