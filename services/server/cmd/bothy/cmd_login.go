package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/bothy/bothy/services/server/internal/config"
)

func init() {
	register(command{Name: "login", Summary: "check a token (from stdin) with the server and save it for later commands",
		NoConfig: true, Remote: true, Setup: setupLogin})
	register(command{Name: "logout", Summary: "forget the token saved for the server", NoConfig: true, Remote: true, Setup: setupLogout})
}

// credentials are the tokens "bothy login" saved, by server base URL. The
// file is readable by its owner only.
type credentials struct {
	Servers map[string]savedToken `json:"servers"`
}

type savedToken struct {
	Token string `json:"token"`
}

// credentialsPath is $BOTHY_CREDENTIALS, else bothy/credentials in the
// user's configuration directory (os.UserConfigDir).
func credentialsPath(environ []string) (string, error) {
	if p := lookupEnv(environ, config.EnvCredentials); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("credentials file: %w (set BOTHY_CREDENTIALS)", err)
	}
	return filepath.Join(dir, "bothy", "credentials"), nil
}

// loadCredentials reads the credentials file; a missing file has none.
func loadCredentials(environ []string) (*credentials, error) {
	c := &credentials{Servers: map[string]savedToken{}}
	path, err := credentialsPath(environ)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("credentials file: %w", err)
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	if c.Servers == nil {
		c.Servers = map[string]savedToken{}
	}
	return c, nil
}

// save writes c to the credentials file with mode 0600 (its directory
// 0700), replacing it whole by a rename, so a reader never sees half a
// file.
func (c *credentials) save(environ []string) (string, error) {
	path, err := credentialsPath(environ)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("credentials file: %w", err)
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return "", fmt.Errorf("credentials file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(append(raw, '\n'))
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("credentials file: %w", err)
	}
	return path, nil
}

func setupLogin(fs *pflag.FlagSet) func(context.Context, *call) error {
	return func(ctx context.Context, c *call) error {
		base, err := c.remote.requireServer("login")
		if err != nil {
			return err
		}
		token := cmp.Or(c.remote.token, lookupEnv(c.environ, config.EnvToken))
		if token == "" {
			if token, err = readToken(c, base); err != nil {
				return err
			}
		}
		// Any valid token may list its own subscriptions: the call checks
		// the token and nothing else.
		err = newAPIClient(base, token).do(ctx, http.MethodGet, "/v1/webhooks", url.Values{"limit": {"1"}}, nil, nil)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return fmt.Errorf("%s refused the token: %w", base, err)
		}
		if err != nil {
			return fmt.Errorf("check the token with %s: %w", base, err)
		}
		creds, err := loadCredentials(c.environ)
		if err != nil {
			return err
		}
		creds.Servers[base] = savedToken{Token: token}
		path, err := creds.save(c.environ)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "token for %s checked and saved in %s\nrun commands with --server %s, or export BOTHY_SERVER=%s\n", base, path, base, base)
		return nil
	}
}

// requireServer returns the server named for command (login or logout),
// as credentials are saved under it.
func (r *remoteFlags) requireServer(command string) (string, error) {
	raw := r.serverURL()
	if raw == "" {
		return "", fmt.Errorf("%w: name the server: bothy %s --server URL (or set BOTHY_SERVER)", errUsage, command)
	}
	return normalizeServer(raw)
}

// readToken reads the token from stdin: without echo from a terminal,
// else its first line.
func readToken(c *call, base string) (string, error) {
	if f, ok := c.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(c.stderr, "token for %s: ", base)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(c.stderr)
		if err != nil {
			return "", fmt.Errorf("read the token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var line string
	var err error
	if c.stdin != nil {
		line, err = bufio.NewReader(io.LimitReader(c.stdin, 64<<10)).ReadString('\n')
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the token from stdin: %w", err)
	}
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("%w: no token: give it on stdin, with BOTHY_TOKEN or with --token", errUsage)
	}
	return line, nil
}

func setupLogout(fs *pflag.FlagSet) func(context.Context, *call) error {
	return func(ctx context.Context, c *call) error {
		base, err := c.remote.requireServer("logout")
		if err != nil {
			return err
		}
		creds, err := loadCredentials(c.environ)
		if err != nil {
			return err
		}
		if _, ok := creds.Servers[base]; !ok {
			fmt.Fprintf(c.stdout, "no token saved for %s\n", base)
			return nil
		}
		delete(creds.Servers, base)
		path, err := creds.save(c.environ)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "token for %s removed from %s (the token itself stays valid until revoked)\n", base, path)
		return nil
	}
}
