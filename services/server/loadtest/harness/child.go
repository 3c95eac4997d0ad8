package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// ChildEnv names the role a load test's process runs as when another one
// started it (StartChild): a part whose CPU time must be its own, such as
// a receiver.
const ChildEnv = "BOTHY_PERF_CHILD"

// ChildFunc is a child role's main. Its context ends when the parent
// stops it (its stdin closes) or on SIGTERM or SIGINT.
type ChildFunc func(ctx context.Context, io *ChildIO) error

// ChildIO is a child's side of the pipes to its parent: the parameters
// the parent sent, and JSON lines back.
type ChildIO struct {
	dec *json.Decoder
	out *json.Encoder
}

// Params decodes the parameters the parent gave StartChild into v.
func (c *ChildIO) Params(v any) error { return c.dec.Decode(v) }

// Send writes v to the parent as one JSON line (StartChild's hello first,
// then what Child.Next reads).
func (c *ChildIO) Send(v any) error { return c.out.Encode(v) }

// RunChild runs the role ChildEnv names, if it is set, and exits: with 0
// when the role returned nil, else with 1 after printing the error on
// stderr. Without ChildEnv it returns at once. A load test's command calls
// it first in main, and its test binary first in TestMain.
func RunChild(roles map[string]ChildFunc) {
	role := os.Getenv(ChildEnv)
	if role == "" {
		return
	}
	run, ok := roles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%s: no such role\n", ChildEnv, role)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(ctx)
	in := bufio.NewReader(os.Stdin)
	cio := &ChildIO{dec: json.NewDecoder(in), out: json.NewEncoder(os.Stdout)}
	var err error
	if ctx, err = endOnEOF(ctx, cancel, cio); err == nil {
		err = run(ctx, cio)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// endOnEOF decodes the parameters first (the role reads them from a
// buffer), then cancels ctx once stdin has nothing more: the parent
// closed it, or died.
func endOnEOF(ctx context.Context, cancel context.CancelFunc, cio *ChildIO) (context.Context, error) {
	var raw json.RawMessage
	if err := cio.dec.Decode(&raw); err != nil {
		return ctx, fmt.Errorf("read parameters: %w", err)
	}
	rest := io.MultiReader(cio.dec.Buffered(), os.Stdin)
	cio.dec = json.NewDecoder(bytes.NewReader(raw))
	go func() {
		_, _ = io.Copy(io.Discard, rest)
		cancel()
	}()
	return ctx, nil
}

// Child is a process StartChild started.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *json.Decoder
}

// StartChild starts this program's own binary as role, with ChildEnv set
// and params as JSON on its stdin, and decodes the first line it sends
// into hello. The child's stderr is this process's.
func StartChild(ctx context.Context, role string, params, hello any) (*Child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), ChildEnv+"="+role)
	cmd.Stderr = os.Stderr
	// Killed with this process when it dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &Child{cmd: cmd}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = json.NewDecoder(stdout)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	if err := json.NewEncoder(c.stdin).Encode(params); err != nil {
		_, _ = c.Wait()
		return nil, fmt.Errorf("%s: send parameters: %w", role, err)
	}
	if err := c.Next(hello); err != nil {
		_, _ = c.Wait()
		return nil, fmt.Errorf("%s: no hello: %w", role, err)
	}
	return c, nil
}

// PID is the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Next decodes the next line the child sent into v.
func (c *Child) Next(v any) error {
	if err := c.out.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the child ended")
		}
		return err
	}
	return nil
}

// Wait closes the child's stdin, which tells it to end, waits for it and
// returns the CPU time it used and how it ended.
func (c *Child) Wait() (time.Duration, error) {
	_ = c.stdin.Close()
	err := c.cmd.Wait()
	var cpu time.Duration
	if st := c.cmd.ProcessState; st != nil {
		cpu = st.UserTime() + st.SystemTime()
	}
	return cpu, err
}
