package pushhandoff

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	gosync "sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
)

// receiverEnv, set to 1, makes a binary that calls ServeReceiverIfAsked the
// local push service of the deployment and fan-out modes instead of
// itself.
const receiverEnv = "BOTHY_PUSH_HANDOFF_RECEIVER"

// ServeReceiverIfAsked runs this process as the local push service of the
// deployment and fan-out modes and exits, when the harness started it so (environment
// BOTHY_PUSH_HANDOFF_RECEIVER=1); otherwise it returns at once. The command
// and its test's TestMain call it first.
//
// Those modes run the receiver in a process of its own so that its CPU
// (decrypting every message, verifying VAPID) is measured apart from the
// worker's: a push service runs on someone else's machine.
func ServeReceiverIfAsked() {
	if os.Getenv(receiverEnv) != "1" {
		return
	}
	if err := serveReceiver(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "push_handoff receiver:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// receiverSpec is the first thing the harness writes to the child.
type receiverSpec struct {
	VAPIDPublicKey string   `json:"vapid_public_key"`
	Devices        []string `json:"devices"`
}

// serveReceiver speaks the child's side of a line protocol: it reads a
// receiverSpec, answers "D name endpoint p256dh auth" per device and "R"
// when it serves, then "M event-id seq device unix-nanos" per decrypted
// message; when its input closes it writes "E quoted-error" per failed
// request and ends.
func serveReceiver(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	var spec receiverSpec
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	var mu gosync.Mutex
	w := bufio.NewWriterSize(out, 256<<10)
	rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: spec.VAPIDPublicKey, OnMessage: func(m pushtest.Message) {
		var p push.Payload
		if json.Unmarshal(m.Payload, &p) != nil {
			return // counted as lost by the harness
		}
		mu.Lock()
		fmt.Fprintf(w, "M %s %d %s %d\n", p.EventID, p.Seq, m.Device, m.At.UnixNano())
		mu.Unlock()
	}})
	defer rcv.Close()
	for _, name := range spec.Devices {
		d, endpoint, err := rcv.AddDevice(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "D %s %s %s %s\n", name, endpoint, d.P256dh(), d.Auth())
	}
	fmt.Fprintln(w, "R")
	if err := w.Flush(); err != nil {
		return err
	}

	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				mu.Lock()
				_ = w.Flush()
				mu.Unlock()
			}
		}
	}()
	_, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), in)) // until the harness closes our input
	close(stop)
	<-flushed
	mu.Lock()
	defer mu.Unlock()
	for _, err := range rcv.Errors() {
		fmt.Fprintf(w, "E %s\n", strconv.Quote(err.Error()))
	}
	return w.Flush()
}

// deviceKeys is a device the child receiver created.
type deviceKeys struct {
	endpoint, p256dh, auth string
}

// receiverProc is the harness's handle on the child receiver.
type receiverProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	devices map[string]deviceKeys
	done    chan struct{}

	mu   gosync.Mutex
	errs []string
}

// arrival is a message the child receiver decrypted: of event id (seq)
// for a device, at a time.
type arrival struct {
	id     uuid.UUID
	seq    int64
	device string
	at     time.Time
}

// startReceiverProc starts this binary again as the receiver with the
// devices named, and calls arrived for every decrypted message.
func startReceiverProc(ctx context.Context, vapidPublicKey string, names []string, arrived func(arrival)) (*receiverProc, error) {
	cmd, stdin, stdout, err := startReceiverChild(ctx)
	if err != nil {
		return nil, err
	}
	p := &receiverProc{cmd: cmd, stdin: stdin, devices: make(map[string]deviceKeys, len(names)), done: make(chan struct{})}
	if err := json.NewEncoder(stdin).Encode(receiverSpec{VAPIDPublicKey: vapidPublicKey, Devices: names}); err != nil {
		p.abort()
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if err := p.readDevices(sc, len(names)); err != nil {
		p.abort()
		return nil, err
	}
	go p.readReports(sc, arrived)
	return p, nil
}

// startReceiverChild starts this binary with receiverEnv set, its input and
// output piped.
func startReceiverChild(ctx context.Context) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), receiverEnv+"=1")
	cmd.Stderr = os.Stderr
	// Killed with this process when it dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("start receiver process: %w", err)
	}
	return cmd, stdin, stdout, nil
}

// readDevices reads the child's "D" lines up to its "R" and requires n
// devices.
func (p *receiverProc) readDevices(sc *bufio.Scanner, n int) error {
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 1 && f[0] == "R" {
			break
		}
		if len(f) != 5 || f[0] != "D" {
			return fmt.Errorf("receiver process: unexpected line %q", sc.Text())
		}
		p.devices[f[1]] = deviceKeys{endpoint: f[2], p256dh: f[3], auth: f[4]}
	}
	if len(p.devices) != n {
		return errors.Join(errors.New("receiver process ended before it served"), sc.Err())
	}
	return nil
}

// readReports reads the child's "M" lines, calling arrived for each, and
// its "E" lines until its output ends, then closes p.done.
func (p *receiverProc) readReports(sc *bufio.Scanner, arrived func(arrival)) {
	defer close(p.done)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "M "):
			if a, ok := parseArrival(line); ok {
				arrived(a)
			}
		case strings.HasPrefix(line, "E "):
			s, err := strconv.Unquote(line[2:])
			if err != nil {
				s = line[2:]
			}
			p.mu.Lock()
			p.errs = append(p.errs, s)
			p.mu.Unlock()
		}
	}
}

// parseArrival parses an "M" line; a line it cannot parse is a message
// that counts as missing.
func parseArrival(line string) (arrival, bool) {
	f := strings.Fields(line)
	if len(f) != 5 {
		return arrival{}, false
	}
	id, err1 := uuid.Parse(f[1])
	seq, err2 := strconv.ParseInt(f[2], 10, 64)
	ns, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return arrival{}, false
	}
	return arrival{id: id, seq: seq, device: f[3], at: time.Unix(0, ns)}, true
}

// pid is the child's process id, for its CPU time.
func (p *receiverProc) pid() int { return p.cmd.Process.Pid }

// abort ends a child that did not get to serve.
func (p *receiverProc) abort() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// stop closes the child's input, reads what it still reports and waits
// for it; it returns the requests that failed VAPID or decryption.
func (p *receiverProc) stop() []string {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
	}
	_ = p.cmd.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs
}
