package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binary is the bothy binary a load test runs.
type Binary struct {
	// Path is the executable.
	Path string
	// Version is what "bothy version" printed: the build's commit.
	Version string
}

// BuildOrUse returns the binary at path when path is set, else builds
// ./services/server/cmd/bothy of the module the working directory is in
// into dir, as "go build" would for a user.
func BuildOrUse(ctx context.Context, path, dir string) (*Binary, error) {
	if path == "" {
		var err error
		if path, err = build(ctx, dir); err != nil {
			return nil, err
		}
	}
	out, err := exec.CommandContext(ctx, path, "version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s version: %w", path, err)
	}
	return &Binary{Path: path, Version: strings.TrimSpace(string(out))}, nil
}

func build(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bothy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./services/server/cmd/bothy")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./services/server/cmd/bothy: %w: %s", err, stderr.String())
	}
	return path, nil
}

// moduleRoot is the directory of the go.mod the working directory is in.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the bothy module: run from the repository, or pass --bin")
	}
	return filepath.Dir(mod), nil
}
