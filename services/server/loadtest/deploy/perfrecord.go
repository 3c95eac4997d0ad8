package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Recording is a "perf record" of some processes: a CPU profile with call
// graphs, of the real binary as it runs, for "perf report".
type Recording struct {
	cmd  *exec.Cmd
	File string
}

// Record starts "perf record" on the processes into dir/name.perf.data.
func Record(ctx context.Context, dir, name string, pids ...int) (*Recording, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &Recording{File: filepath.Join(dir, name+".perf.data")}
	list := ""
	for i, p := range pids {
		if i > 0 {
			list += ","
		}
		list += fmt.Sprint(p)
	}
	r.cmd = exec.CommandContext(ctx, "perf", "record", "-F", "997", "-g", "-o", r.File, "-p", list)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	return r, nil
}

// Stop ends the recording and waits until its file is written.
func (r *Recording) Stop() {
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		_ = r.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
}
