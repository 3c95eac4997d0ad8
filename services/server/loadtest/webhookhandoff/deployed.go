package webhookhandoff

import (
	"context"
	"fmt"

	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/loadtest/deploy"
)

// deployment is the bothy processes of a deployment-mode run and the
// producers' token.
type deployment struct {
	*deploy.Deployment
	token string
}

// writer is the principal the HTTP producers append as.
const writer = "perf-writer"

// prepareDeployment finds or builds the binary, starts sampling the
// server's backends and mints the producers' token: write on every
// space, scope events:write.
func (h *handoff) prepareDeployment(ctx context.Context) (*deployment, error) {
	admin, err := dburl.WithDatabase(h.scratch.URL, "postgres")
	if err != nil {
		return nil, err
	}
	var spaces []string
	for i := range h.opts.spaces {
		spaces = append(spaces, fmt.Sprintf("space-%03d", i))
	}
	token, err := deploy.WriterToken(ctx, h.scratch.Pool, writer, spaces)
	if err != nil {
		return nil, err
	}
	dd, err := deploy.NewDeployment(ctx, &deploy.DeploymentParams{Bin: h.opts.bin, Keys: h.serverKeys(),
		ConfigFile: h.opts.Config, Workers: h.opts.workers, AdminURL: admin, Stdout: h.stdout})
	if err != nil {
		return nil, err
	}
	return &deployment{Deployment: dd, token: token}, nil
}

// serverKeys are the configuration of every bothy process of the run: the
// scratch database and receivers on loopback; the rest is the defaults
// (logs at info, an access log line per request, into the log files) or
// --config's.
func (h *handoff) serverKeys() map[string]string {
	return map[string]string{"database.url": h.scratch.URL,
		"webhooks.allow_private_targets": "true", "push.allow_private_targets": "true"}
}

// others are the processes measured besides the deployment's: the
// receiver and the private server.
func (h *handoff) others(c *costs) (*deploy.Others, error) {
	pm, err := h.private.PID()
	if err != nil {
		return nil, err
	}
	return &deploy.Others{Receiver: h.rcv.pid(), Postmaster: pm, DB: c.db}, nil
}
